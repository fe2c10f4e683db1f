"""``catwalk::calculate_metrics``, ``catwalk::tabulate_metrics`` and ``catwalk::print_metrics``."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from tango import Step
from tango.common.aliases import PathOrStr
from tango.common.logging import cli_logger
from tango.format import Format

from .atomic import AtomicJsonFormat, replace_atomically
from .averages import STDERR_SUFFIX, binomial_stderr, macro_average
from .tables import MetricsTable, check_average_over


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
    names = ["acc", "acc_norm", "acc_per_token"]
    if all("unconditioned_logliks" in p for p in predictions):
        names.append("acc_uncond")
    return names


def accuracies(predictions: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Each accuracy of ``predictions`` with its binomial standard error, and their count."""
    labels = torch.tensor([p["label"] for p in predictions])
    metrics: Dict[str, Any] = {}
    for name in rankings(predictions):
        # Ties go to the first choice (argmax's rule, and lm-evaluation-harness's).
        metrics[name] = (choice_scores(predictions, name).argmax(-1) == labels).double().mean().item()
        metrics[name + STDERR_SUFFIX] = binomial_stderr(metrics[name], len(predictions))
    metrics["count"] = len(predictions)
    return metrics


@Step.register("catwalk::calculate_metrics")
class CalculateMetricsStep(Step):
    """Accuracy of predictions from ``catwalk::predict``, ranking choices by summed
    log-likelihood (``acc``), per character of the answer text (``acc_norm``, as
    lm-evaluation-harness), per token (``acc_per_token``), and, where the predictions hold
    log-likelihoods after the task's unconditioned context (``unconditioned: true`` in
    ``catwalk::predict``), by the gain over it (``acc_uncond``); each with its standard error
    (``acc_stderr``, ...; see :mod:`.averages`).

    For a task with groups (MMLU's subjects), the top-level numbers are over all instances
    (lm-evaluation-harness's ``mmlu`` number), ``groups`` holds each group's metrics and
    ``macro`` their macro average.

    Runs in one process, on the predictions as cached: there is nothing to sync across processes
    (the system this replaces synced torchmetrics objects across DDP workers in a callback).
    """

    VERSION = "cw2"  # cw2: standard errors, groups; acc_norm per answer character (PredictStep cw2)
    FORMAT = AtomicJsonFormat()

    def run(self, predictions: List[Dict[str, Any]]) -> Dict[str, Any]:  # type: ignore[override]
        if not predictions:
            raise ValueError("No predictions to compute metrics on")
        metrics = accuracies(predictions)
        by_group: Dict[str, List[Dict[str, Any]]] = {}
        for p in predictions:
            if "group" in p:
                by_group.setdefault(p["group"], []).append(p)
        if by_group:
            metrics["groups"] = {group: accuracies(members) for group, members in sorted(by_group.items())}
            metrics["macro"] = macro_average(list(metrics["groups"].values()))
        self.logger.info("Metrics: %s", {k: v for k, v in metrics.items() if k != "groups"})
        return metrics


@Format.register("catwalk::metrics_table")
class MetricsTableFormat(Format[MetricsTable]):
    """``table.json`` (read back), plus ``table.md`` and ``table.csv`` for people and spreadsheets."""

    VERSION = "1"

    def write(self, artifact: MetricsTable, dir: PathOrStr) -> None:
        dir = Path(dir)
        replace_atomically(dir / "table.md", lambda p: p.write_text(artifact.to_markdown()))
        replace_atomically(dir / "table.csv", lambda p: p.write_text(artifact.to_csv()))
        data = {"columns": artifact.columns, "rows": artifact.rows}
        replace_atomically(dir / "table.json", lambda p: p.write_text(json.dumps(data, indent=1)))

    def read(self, dir: PathOrStr) -> MetricsTable:
        data = json.loads((Path(dir) / "table.json").read_text())
        return MetricsTable(data["columns"], data["rows"])


@Step.register("catwalk::tabulate_metrics")
class TabulateMetricsStep(Step):
    """Gathers many metric results, keyed by names like ``task/model/seed``, into one table,
    cached as Markdown, CSV and JSON. ``key_columns`` names the parts of those keys;
    ``average_over`` (e.g. ``"task"``) adds a macro-average row for each combination of the
    other key columns."""

    VERSION = "cw2"  # cw2: standard-error columns, macro averages
    FORMAT = MetricsTableFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        check_average_over(kwargs.get("key_columns") or ["run"], kwargs.get("average_over"))
        return kwargs

    def run(  # type: ignore[override]
        self,
        metrics: Dict[str, Dict[str, Any]],
        key_columns: Optional[List[str]] = None,
        average_over: Optional[str] = None,
    ) -> MetricsTable:
        return MetricsTable.from_results(metrics, key_columns or ["run"], average_over)


@Step.register("catwalk::print_metrics")
class PrintMetricsStep(Step):
    """Prints a table from ``catwalk::tabulate_metrics``. Not cached, so every run ends with
    the table, also when everything came from the cache."""

    CACHEABLE = False

    def run(self, table: MetricsTable, title: str = "Metrics") -> str:  # type: ignore[override]
        cli_logger.info(table.to_rich(title))
        return table.to_markdown()
