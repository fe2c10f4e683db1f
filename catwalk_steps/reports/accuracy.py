"""Accuracies of predictions (``catwalk::predict`` records) under each way of ranking choices."""

from typing import Any, Dict, List

import torch

from .averages import STDERR_SUFFIX, binomial_stderr

#: Every way of ranking choices (:func:`choice_scores`); ``acc_uncond`` needs the unconditioned
#: log-likelihoods (:func:`rankings`).
RANKINGS = ("acc", "acc_norm", "acc_per_token", "acc_uncond")


def choice_scores(predictions: List[Dict[str, Any]], metric: str) -> torch.Tensor:
    """``[instances, most choices]`` scores under ``metric``'s ranking, ``-inf`` past an
    instance's last choice."""
    width = max(len(p["logliks"]) for p in predictions)
    scores = torch.full((len(predictions), width), float("-inf"), dtype=torch.float64)
    for row, p in enumerate(predictions):
        values = torch.tensor(p["logliks"], dtype=torch.float64)
        if metric == "acc_norm":  # per character of the answer text, lm-evaluation-harness's acc_norm
            values = values / torch.tensor(p["num_chars"], dtype=torch.float64)
        elif metric == "acc_per_token":
            values = values / torch.tensor(p["num_tokens"], dtype=torch.float64)
        elif metric == "acc_uncond":  # what the context adds to each choice
            values = values - torch.tensor(p["unconditioned_logliks"], dtype=torch.float64)
        scores[row, : len(values)] = values
    return scores


def rankings(predictions: List[Dict[str, Any]]) -> List[str]:
    """The metrics that ``predictions`` can rank choices by: ``acc_uncond`` only where every
    prediction has its unconditioned log-likelihoods."""
    unconditioned = all("unconditioned_logliks" in p for p in predictions)
    return [name for name in RANKINGS if name != "acc_uncond" or unconditioned]


def correctness(predictions: List[Dict[str, Any]], metric: str) -> torch.Tensor:
    """Per instance, 1.0 where ``metric``'s pick is the gold label, else 0.0. Ties go to the
    first choice (argmax's rule, and lm-evaluation-harness's)."""
    labels = torch.tensor([p["label"] for p in predictions])
    return (choice_scores(predictions, metric).argmax(-1) == labels).double()


def accuracies(predictions: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Each accuracy of ``predictions`` with its binomial standard error, and their count."""
    metrics: Dict[str, Any] = {}
    for name in rankings(predictions):
        metrics[name] = correctness(predictions, name).mean().item()
        metrics[name + STDERR_SUFFIX] = binomial_stderr(metrics[name], len(predictions))
    metrics["count"] = len(predictions)
    return metrics
