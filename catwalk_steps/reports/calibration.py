"""How well the model's confidence matches its accuracy, from ``catwalk::predict`` records.

Each instance's choices are turned into probabilities by a softmax over their summed
log-likelihoods (the ranking of ``acc``), over that instance's own choices (instances may have
different numbers of choices).

- ``ece``: top-label expected calibration error: the confidence is the highest probability, the
  outcome whether that choice (the first of equal ones, as ``acc``) is the gold one; 15 bins of
  equal width, L1, weighted by their share of instances (torchmetrics'
  ``BinaryCalibrationError(n_bins=15, norm="l1")``).
- ``brier``: the mean over instances of the summed squared difference between the
  probabilities and the one-hot gold label (0 is perfect; 2 the worst).

Neither comes with a standard error.
"""

from typing import Any, Dict, List

import torch

from .accuracy import choice_scores

ECE_BINS = 15


def calibration(predictions: List[Dict[str, Any]]) -> Dict[str, float]:
    # Imported here: a cached rerun, which computes no metric, does not pay for it.
    from torchmetrics.classification import BinaryCalibrationError

    scores = choice_scores(predictions, "acc")
    probabilities = torch.softmax(scores, dim=-1)
    labels = torch.tensor([p["label"] for p in predictions])
    chosen = scores.argmax(-1)  # as acc picks
    confidence = probabilities.gather(-1, chosen[:, None])[:, 0]
    correct = (chosen == labels).long()
    ece = BinaryCalibrationError(n_bins=ECE_BINS, norm="l1")(confidence, correct).item()
    return {"ece": ece, "brier": brier_scores(predictions).mean().item()}


def brier_scores(predictions: List[Dict[str, Any]]) -> torch.Tensor:
    """Per instance, the summed squared difference between the softmax over its choices and the
    one-hot gold label (``brier`` is their mean; paired comparisons use them one by one)."""
    probabilities = torch.softmax(choice_scores(predictions, "acc"), dim=-1)
    labels = torch.tensor([p["label"] for p in predictions])
    one_hot = torch.nn.functional.one_hot(labels, probabilities.shape[-1]).to(probabilities)
    return ((probabilities - one_hot) ** 2).sum(-1)
