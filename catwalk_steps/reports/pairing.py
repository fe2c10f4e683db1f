"""Two sets of prediction records as paired per-instance values, refused when they are not the
same instances: a paired test of different questions would be a wrong answer, not an error."""

from typing import Any, Dict, List, Mapping, Protocol, Sequence

import numpy as np

from .comparison import CONFIDENCE, RESAMPLES, compare_values


class MismatchedPredictions(ValueError):
    """The two sets of predictions are not of the same instances."""


class PerInstance(Protocol):
    """What comparisons need of a request kind (``catwalk_steps.kinds``): its records'
    per-instance metrics, by name, and which of them are 0/1 (the test each gets)."""

    def values(self, records: Sequence[Mapping[str, Any]]) -> Dict[str, np.ndarray]: ...

    def binary(self, metric: str) -> bool: ...


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
    kind: PerInstance,
    baseline: List[Mapping[str, Any]],
    candidate: List[Mapping[str, Any]],
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Dict[str, Any]:
    """Every per-instance metric of ``kind`` that both carry, compared
    (:func:`.comparison.compare_values`, with the test ``kind`` says it takes):
    ``{"n": instances, "metrics": {metric: comparison}}``."""
    if not baseline:
        raise MismatchedPredictions("No predictions to compare")
    check_same_instances(baseline, candidate)
    b_values, c_values = kind.values(baseline), kind.values(candidate)
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
            name: compare_values(name, b_values[name], c_values[name], kind.binary(name), confidence, resamples,
                                 seed).to_dict()
            for name in shared
        },
    }
