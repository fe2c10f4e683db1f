"""Metrics of generation records (``catwalk::predict`` on a generative task): the mean of each
per-instance score (``exact_match``, ``f1``, ``exact_match/strict-match``, ...) with its
standard error, as lm-evaluation-harness aggregates them (``mean``, ``mean_stderr``: the sample
standard deviation over the square root of the count; for 0/1 scores that is the binomial
``acc_stderr`` of :mod:`.averages`)."""

import math
from typing import Any, Dict, List

from .averages import STDERR_SUFFIX


def score_averages(predictions: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Each score's mean over ``predictions`` and its standard error (``None`` for one
    instance), the count, and how many prompts were cut to fit the model (``truncated``)."""
    metrics: Dict[str, Any] = {}
    count = len(predictions)
    for name in predictions[0]["scores"]:
        values = [p["scores"][name] for p in predictions]
        mean = sum(values) / count
        metrics[name] = mean
        variance = sum((v - mean) ** 2 for v in values) / (count - 1) if count > 1 else None
        metrics[name + STDERR_SUFFIX] = math.sqrt(variance / count) if variance is not None else None
    metrics["truncated"] = sum(bool(p.get("truncated")) for p in predictions)
    metrics["count"] = count
    return metrics
