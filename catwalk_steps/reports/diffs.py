"""Which questions changed: the instances whose correctness differs between two models' predictions
of the same instances, and the largest swings of the gold answer's margin.

For multiple-choice records the margin of the gold answer is its log-likelihood (under the
metric's ranking) minus the best other choice's: positive where the model picks it, and its
swing from baseline to candidate says how far fine-tuning moved the model on that question,
also where the pick did not change."""

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from .accuracy import choice_scores
from .pairing import check_same_instances, per_instance_values

LARGEST_SWINGS = 20


def gold_margins(records: List[Mapping[str, Any]], metric: str) -> np.ndarray:
    """Per instance, the gold choice's score under ``metric``'s ranking minus the best other's."""
    scores = choice_scores(records, metric).numpy()
    rows = np.arange(len(records))
    labels = np.array([r["label"] for r in records])
    gold = scores[rows, labels]
    scores[rows, labels] = -np.inf
    return gold - scores.max(axis=1)


def instance_text(instance: Any) -> Dict[str, Any]:
    """The prompt and gold answer of a task instance: a multiple-choice one (its choices too) or
    a generation one (``prompt``, ``references``)."""
    if hasattr(instance, "continuations"):
        prompts = instance.prompts()
        text: Dict[str, Any] = {"prompt": instance.description + prompts[instance.label]}
        text["choices"] = [c[len(instance.target_delimiter):] for c in instance.continuations]
        text["gold"] = text["choices"][instance.label]
        return text
    return {"prompt": getattr(instance, "prompt", None), "gold": (getattr(instance, "references", None) or [None])[0]}


def diff_records(
    baseline: List[Mapping[str, Any]],
    candidate: List[Mapping[str, Any]],
    metric: str = "acc",
    instances: Optional[Sequence[Any]] = None,
) -> Dict[str, Any]:
    """``{"metric", "wins", "losses", "ties", "changed": [...], "swings": [...]}``: ``changed``
    holds each instance whose ``metric`` correctness differs (its id, prompt and gold answer
    when ``instances`` are given, and each side's pick and margins, or its record's own fields
    for records without choices); ``swings`` the :data:`LARGEST_SWINGS` largest changes of the
    gold margin (multiple-choice records only), largest first."""
    check_same_instances(baseline, candidate)
    b_values, c_values = per_instance_values(baseline), per_instance_values(candidate)
    if metric not in b_values or metric not in c_values:
        raise ValueError(f"Cannot diff on {metric!r}: the predictions carry {sorted(set(b_values) & set(c_values))}")
    b_right, c_right = b_values[metric].astype(bool), c_values[metric].astype(bool)
    text = {i.id: instance_text(i) for i in instances or []}
    multiple_choice = all("logliks" in r for r in baseline + candidate)

    def side(records: List[Mapping[str, Any]], n: int, right: np.ndarray, margins: Optional[np.ndarray]) -> Dict[str, Any]:
        record = records[n]
        if margins is None:
            return {"correct": bool(right[n]), **{k: v for k, v in record.items() if k not in ("id", "label")}}
        pick = int(choice_scores([record], metric).argmax())
        choices = text.get(record["id"], {}).get("choices")
        return {
            "correct": bool(right[n]),
            "pick": pick,
            **({"pick_text": choices[pick]} if choices else {}),
            "margin": record["margin"],
            "gold_margin": float(margins[n]),
        }

    b_margins = gold_margins(baseline, metric) if multiple_choice else None
    c_margins = gold_margins(candidate, metric) if multiple_choice else None
    changed = [
        {
            "id": baseline[n]["id"],
            **({"label": baseline[n]["label"]} if "label" in baseline[n] else {}),
            **text.get(baseline[n]["id"], {}),
            "change": "win" if c_right[n] else "loss",
            "baseline": side(baseline, n, b_right, b_margins),
            "candidate": side(candidate, n, c_right, c_margins),
        }
        for n in np.flatnonzero(b_right != c_right)
    ]
    swings: List[Dict[str, Any]] = []
    if multiple_choice:
        swing = c_margins - b_margins
        for n in np.argsort(-np.abs(swing), kind="stable")[:LARGEST_SWINGS]:
            swings.append({
                "id": baseline[n]["id"], "baseline_gold_margin": float(b_margins[n]),
                "candidate_gold_margin": float(c_margins[n]), "swing": float(swing[n]),
                "baseline_correct": bool(b_right[n]), "candidate_correct": bool(c_right[n]),
            })
    wins = int(np.sum(c_right & ~b_right))
    losses = int(np.sum(b_right & ~c_right))
    return {
        "metric": metric, "n": len(baseline), "wins": wins, "losses": losses,
        "ties": len(baseline) - wins - losses, "changed": changed, "swings": swings,
    }


def diff_markdown(diff: Mapping[str, Any], baseline_name: str, candidate_name: str) -> str:
    """The summary a person reads first: wins, losses and ties, and the largest margin swings."""
    lines = [
        f"# {candidate_name} vs {baseline_name} ({diff['metric']}, {diff['n']} instances)",
        "",
        f"- wins (candidate right, baseline wrong): {diff['wins']}",
        f"- losses (baseline right, candidate wrong): {diff['losses']}",
        f"- ties (both right or both wrong): {diff['ties']}",
        "",
        "Every changed instance is in `diff.jsonl`.",
    ]
    if diff["swings"]:
        lines += [
            "",
            f"## The {len(diff['swings'])} largest swings of the gold answer's margin",
            "",
            "The gold choice's score minus the best other choice's (positive: picked), before and after.",
            "",
            "| id | baseline margin | candidate margin | swing | baseline | candidate |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {s['id']} | {s['baseline_gold_margin']:+.3f} | {s['candidate_gold_margin']:+.3f} | {s['swing']:+.3f} "
            f"| {'right' if s['baseline_correct'] else 'wrong'} | {'right' if s['candidate_correct'] else 'wrong'} |"
            for s in diff["swings"]
        ]
    return "\n".join(lines) + "\n"
