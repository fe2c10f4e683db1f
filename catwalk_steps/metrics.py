"""``catwalk::calculate_metrics`` and ``catwalk::print_metrics``."""

from typing import Any, Dict, List

import torch
from rich.table import Table
from tango import Step
from tango.common.logging import cli_logger
from torchmetrics.classification import MulticlassAccuracy

from .atomic import AtomicJsonFormat

#: How each accuracy variant normalises a choice's summed log-likelihood before the argmax.
NORMALISATIONS = {
    "acc": None,  # summed log-likelihood
    "acc_norm": "num_chars",  # per character, lm-evaluation-harness's acc_norm
    "acc_per_token": "num_tokens",
}


def choice_scores(predictions: List[Dict[str, Any]], normalise_by) -> torch.Tensor:
    """``[instances, most choices]`` scores, ``-inf`` where an instance has fewer choices."""
    width = max(len(p["logliks"]) for p in predictions)
    scores = torch.full((len(predictions), width), float("-inf"), dtype=torch.float64)
    for row, p in enumerate(predictions):
        values = torch.tensor(p["logliks"], dtype=torch.float64)
        if normalise_by is not None:
            values = values / torch.tensor(p[normalise_by], dtype=torch.float64)
        scores[row, : len(values)] = values
    return scores


@Step.register("catwalk::calculate_metrics")
class CalculateMetricsStep(Step):
    """Accuracy of predictions from ``catwalk::predict``, plus its length-normalised variants.

    Runs in one process; ``sync_on_compute=False`` says so to torchmetrics, which would
    otherwise all-gather whenever a process group happens to exist.
    """

    VERSION = "cw1"
    FORMAT = AtomicJsonFormat()

    def run(self, predictions: List[Dict[str, Any]]) -> Dict[str, float]:  # type: ignore[override]
        if not predictions:
            raise ValueError("No predictions to compute metrics on")
        labels = torch.tensor([p["label"] for p in predictions])
        metrics: Dict[str, float] = {}
        for name, normalise_by in NORMALISATIONS.items():
            scores = choice_scores(predictions, normalise_by)
            accuracy = MulticlassAccuracy(num_classes=scores.shape[1], average="micro", sync_on_compute=False)
            accuracy.update(scores.argmax(-1), labels)
            metrics[name] = accuracy.compute().item()
        metrics["count"] = len(predictions)
        self.logger.info("Metrics: %s", metrics)
        return metrics


@Step.register("catwalk::print_metrics")
class PrintMetricsStep(Step):
    """Prints named metric results as one table. Not cached, so every run ends with the table,
    also when all the metrics come from the cache."""

    CACHEABLE = False

    def run(self, metrics: Dict[str, Dict[str, float]]) -> str:  # type: ignore[override]
        columns = sorted({key for result in metrics.values() for key in result})
        table = Table(title="Metrics")
        table.add_column("run")
        for column in columns:
            table.add_column(column, justify="right")
        for name, result in metrics.items():
            table.add_row(name, *(_cell(result.get(column)) for column in columns))
        cli_logger.info(table)
        lines = [" | ".join(["run", *columns])] + [
            " | ".join([name, *(_cell(r.get(c)) for c in columns)]) for name, r in metrics.items()
        ]
        return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)
