"""Which questions changed: the instances whose correctness differs between two models' predictions
of the same instances, and the largest swings of the gold answer's margin.

For multiple-choice records the margin of the gold answer is its log-likelihood (under the
metric's ranking) minus the best other choice's: positive where the model picks it, and its
swing from baseline to candidate says how far fine-tuning moved the model on that question,
also where the pick did not change."""

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from .pairing import PerInstance, check_same_instances

LARGEST_SWINGS = 20


class DiffKind(PerInstance):
    """What a diff needs of a request kind (``catwalk_steps.kinds``) beside its per-instance values."""

    def gold_margins(self, records: Sequence[Mapping[str, Any]], metric: str) -> Optional[np.ndarray]: ...

    def diff_side(self, record: Mapping[str, Any], metric: str, text: Mapping[str, Any]) -> Dict[str, Any]: ...


def diff_records(
    kind: DiffKind,
    baseline: List[Mapping[str, Any]],
    candidate: List[Mapping[str, Any]],
    metric: str,
    texts: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> Dict[str, Any]:
    """``{"metric", "wins", "losses", "ties", "changed": [...], "swings": [...]}``: ``changed``
    holds each instance whose ``metric`` correctness differs (its id, and its prompt and gold
    answer where ``texts`` has them by id, and what ``kind`` shows of each side); ``swings`` the
    :data:`LARGEST_SWINGS` largest changes of the gold margin (where ``kind`` ranks answers),
    largest first."""
    check_same_instances(baseline, candidate)
    b_values, c_values = kind.values(baseline), kind.values(candidate)
    if metric not in b_values or metric not in c_values:
        raise ValueError(f"Cannot diff on {metric!r}: the predictions carry {sorted(set(b_values) & set(c_values))}")
    b_right, c_right = b_values[metric].astype(bool), c_values[metric].astype(bool)
    texts = texts or {}
    b_margins, c_margins = kind.gold_margins(baseline, metric), kind.gold_margins(candidate, metric)

    def side(records: List[Mapping[str, Any]], n: int, right: np.ndarray, margins: Optional[np.ndarray]) -> Dict[str, Any]:
        shown = kind.diff_side(records[n], metric, texts.get(records[n]["id"], {}))
        return {"correct": bool(right[n]), **shown, **({"gold_margin": float(margins[n])} if margins is not None else {})}

    changed = [
        {
            "id": baseline[n]["id"],
            **({"label": baseline[n]["label"]} if "label" in baseline[n] else {}),
            **texts.get(baseline[n]["id"], {}),
            "change": "win" if c_right[n] else "loss",
            "baseline": side(baseline, n, b_right, b_margins),
            "candidate": side(candidate, n, c_right, c_margins),
        }
        for n in np.flatnonzero(b_right != c_right)
    ]
    swings: List[Dict[str, Any]] = []
    if b_margins is not None and c_margins is not None:
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
