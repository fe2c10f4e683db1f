"""Two sets of prediction records as paired per-instance values, refused when they are not the
same instances: a paired test of different questions would be a wrong answer, not an error."""

from typing import Any, Dict, List, Mapping

import numpy as np

from .accuracy import correctness, rankings
from .calibration import brier_scores
from .comparison import CONFIDENCE, METRIC_KINDS, RESAMPLES, compare_values
from .generation import is_generation


class MismatchedPredictions(ValueError):
    """The two sets of predictions are not of the same instances."""


def per_instance_values(records: List[Mapping[str, Any]]) -> Dict[str, np.ndarray]:
    """Every per-instance metric of ``records``, by their kind: from multiple-choice records
    (``logliks``), each accuracy's 0/1 outcome, the Brier score and the gold choice's
    log-likelihood (``gold_loglik``); from generation records, every score the task gives
    (``exact_match``, ``f1``, ``exact_match/strict-match``, ...); from targets scored with a greedy
    flag (LAMBADA), ``acc`` (the flag) and ``loglik``; from documents, their ``loglik``; and any
    numeric field that :data:`.comparison.METRIC_KINDS` names and every record carries."""
    values: Dict[str, np.ndarray] = {}
    if records and all("logliks" in r for r in records):
        values.update({name: correctness(records, name).numpy() for name in rankings(records)})
        values["brier"] = brier_scores(records).numpy()
        values["gold_loglik"] = np.array([r["logliks"][r["label"]] for r in records], dtype=np.float64)
    if records and all(is_generation(r) for r in records):
        shared = set.intersection(*(set(r["scores"]) for r in records))
        for name in sorted(shared):
            if all(isinstance(r["scores"][name], (int, float)) for r in records):
                values[name] = np.array([r["scores"][name] for r in records], dtype=np.float64)
    if records and all("is_greedy" in r for r in records):
        values["acc"] = np.array([float(r["is_greedy"]) for r in records], dtype=np.float64)
    for name in METRIC_KINDS:
        # bool is an int: a generation record's exact_match may be True/False.
        if name not in values and records and all(isinstance(r.get(name), (int, float)) for r in records):
            values[name] = np.array([r[name] for r in records], dtype=np.float64)
    return values


def check_same_instances(baseline: List[Mapping[str, Any]], candidate: List[Mapping[str, Any]]) -> None:
    """Raises :class:`MismatchedPredictions` naming what differs: the count, the ids (or their
    order), or the gold labels of an id."""
    if len(baseline) != len(candidate):
        raise MismatchedPredictions(
            f"The predictions are of different instance sets: {len(baseline)} baseline instances, "
            f"{len(candidate)} candidate instances (a different split, limit or task?)"
        )
    for b, c in zip(baseline, candidate):
        if b.get("id") != c.get("id"):
            only_b = {r.get("id") for r in baseline} - {r.get("id") for r in candidate}
            what = f"e.g. {sorted(map(str, only_b))[:3]} only in the baseline" if only_b else "in another order"
            raise MismatchedPredictions(
                f"The predictions are of different instances: instance id {b.get('id')!r} (baseline) "
                f"against {c.get('id')!r} (candidate), {what} (a different task, split or data file?)"
            )
        if b.get("label") != c.get("label"):
            raise MismatchedPredictions(
                f"Instance {b.get('id')!r} has gold label {b.get('label')!r} in the baseline and "
                f"{c.get('label')!r} in the candidate: not the same task"
            )


def compare_predictions(
    baseline: List[Mapping[str, Any]],
    candidate: List[Mapping[str, Any]],
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Dict[str, Any]:
    """Every per-instance metric that both carry, compared (:func:`.comparison.compare_values`):
    ``{"n": instances, "metrics": {metric: comparison}}``."""
    if not baseline:
        raise MismatchedPredictions("No predictions to compare")
    check_same_instances(baseline, candidate)
    b_values, c_values = per_instance_values(baseline), per_instance_values(candidate)
    shared = [name for name in b_values if name in c_values]
    if not shared:
        raise MismatchedPredictions(
            f"The predictions share no per-instance metric: baseline has {sorted(b_values)}, candidate {sorted(c_values)}"
        )
    return {
        "n": len(baseline),
        "confidence": confidence,
        "resamples": resamples,
        "seed": seed,
        "metrics": {
            name: compare_values(name, b_values[name], c_values[name], confidence, resamples, seed).to_dict()
            for name in shared
        },
    }
