"""``catwalk::compare``: is the difference between two models' predictions on the same instances real?"""

from typing import Any, Dict, List

from tango import Step
from tango.common.det_hash import det_hash
from tango.common.exceptions import ConfigurationError

from ..kinds import kind_of_records
from ..reports.comparison import CONFIDENCE, RESAMPLES
from ..reports.pairing import compare_predictions
from ..storage.atomic import AtomicJsonFormat
from .predict import PredictStep


def evaluation_setting(step: PredictStep) -> Dict[str, Any]:
    """What decides which instances a ``catwalk::predict`` step scores, and how they are
    prompted: a paired comparison needs both sides to agree on all of it."""
    task = step.kwargs.get("task")
    return {
        "task": type(task).__name__,
        "split": step.kwargs.get("split", "validation"),
        "limit": step.kwargs.get("limit"),
        "few-shot setting (num_shots)": getattr(task, "num_shots", 0),
        "formulation": getattr(task, "formulation", None),
        # Data files, hub revision, template and the rest of the task's settings.
        "task data and settings": det_hash(task),
    }


def check_same_evaluation(baseline: Any, candidate: Any) -> None:
    """Refuses, when the step graph is built, two ``catwalk::predict`` steps that score
    different tasks, splits, instance sets or few-shot settings, naming what differs. (Results
    given directly, not as steps, are checked by their instance ids when the step runs.)"""
    if not (isinstance(baseline, PredictStep) and isinstance(candidate, PredictStep)):
        return
    b, c = evaluation_setting(baseline), evaluation_setting(candidate)
    differ = [key for key in b if b[key] != c[key]]
    if differ:
        named = [key for key in differ if key != "task data and settings"] or differ
        details = "; ".join(
            f"{key}: {b[key]!r} (baseline {baseline.name}) vs {c[key]!r} (candidate {candidate.name})"
            if key != "task data and settings" else "the task's data files or settings differ"
            for key in named
        )
        raise ConfigurationError(f"Cannot compare predictions of different evaluations: {details}")


@Step.register("catwalk::compare")
class CompareStep(Step):
    """Compares two ``catwalk::predict`` results on the same task and split, metric by metric
    (every per-instance metric both carry): ``baseline``, ``candidate``, ``delta`` (candidate -
    baseline), its 95% paired-bootstrap interval (``ci_low``, ``ci_high``), a two-sided
    ``p_value`` and the ``test`` (exact McNemar for 0/1 metrics, with ``wins`` and ``losses``;
    a paired permutation test for continuous ones), and ``n``. See
    :mod:`..reports.comparison`. Deterministic: the resampling is seeded."""

    VERSION = "cw1"
    FORMAT = AtomicJsonFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        check_same_evaluation(kwargs.get("baseline"), kwargs.get("candidate"))
        if not 0 < kwargs.get("confidence", CONFIDENCE) < 1:
            raise ConfigurationError(f"confidence must be between 0 and 1, got {kwargs['confidence']}")
        if kwargs.get("resamples", RESAMPLES) < 1:
            raise ConfigurationError(f"resamples must be positive, got {kwargs['resamples']}")
        return kwargs

    def run(  # type: ignore[override]
        self,
        baseline: List[Dict[str, Any]],
        candidate: List[Dict[str, Any]],
        confidence: float = CONFIDENCE,
        resamples: int = RESAMPLES,
        seed: int = 0,
    ) -> Dict[str, Any]:
        """
        :param baseline: a ``catwalk::predict`` result.
        :param candidate: another, of the same instances.
        :param confidence: of the bootstrap interval.
        :param resamples: bootstrap resamples (and permutations of the continuous tests).
        :param seed: of the resampling.
        """
        kind = kind_of_records([*baseline, *candidate])
        result = compare_predictions(kind, baseline, candidate, confidence, resamples, seed)
        for name, c in result["metrics"].items():
            self.logger.info(
                "%s: %.4f -> %.4f, delta %+.4f [%+.4f, %+.4f], p = %.3g (%s)",
                name, c["baseline"], c["candidate"], c["delta"], c["ci_low"], c["ci_high"], c["p_value"], c["test"],
            )
        return result
