"""Standard errors of accuracies, and macro averages over tasks or groups.

An accuracy ``acc`` comes with ``acc_stderr``, the standard error lm-evaluation-harness reports:
the sample standard deviation of the 0/1 outcomes over the square root of their count,
``sqrt(p (1 - p) / (n - 1))``. A macro average is the plain mean of the parts' accuracies, and
its standard error ``sqrt(sum of squared stderrs) / parts``, treating the parts as independent.
The calibration metrics (``ece``, ``brier``) are averaged the same way, without a standard error.
"""

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

STDERR_SUFFIX = "_stderr"
#: Metrics without a standard error that are macro-averaged too (:mod:`.calibration`).
PLAIN_METRICS = ("ece", "brier")


def binomial_stderr(accuracy: float, count: int) -> Optional[float]:
    """``None`` for a single instance, where the sample deviation is undefined."""
    return math.sqrt(accuracy * (1 - accuracy) / (count - 1)) if count > 1 else None


def accuracy_names(result: Mapping[str, Any]) -> List[str]:
    """The accuracies in a metrics result: the names that come with a standard error."""
    return [name for name in result if not name.endswith(STDERR_SUFFIX) and name + STDERR_SUFFIX in result]


def macro_average(parts: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Each accuracy that every part has, averaged over the parts, with its standard error;
    ``count`` is the parts' total."""
    average: Dict[str, Any] = {}
    for name in accuracy_names(parts[0]):
        if not all(name in part for part in parts):
            continue
        average[name] = sum(part[name] for part in parts) / len(parts)
        errors = [part[name + STDERR_SUFFIX] for part in parts]
        average[name + STDERR_SUFFIX] = (
            math.sqrt(sum(e * e for e in errors)) / len(parts) if all(e is not None for e in errors) else None
        )
    for name in PLAIN_METRICS:
        if all(isinstance(part.get(name), (int, float)) for part in parts):
            average[name] = sum(part[name] for part in parts) / len(parts)
    average["count"] = sum(part.get("count", 0) for part in parts)
    return average
