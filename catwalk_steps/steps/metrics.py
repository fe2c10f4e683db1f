"""``catwalk::calculate_metrics``, ``catwalk::tabulate_metrics`` and ``catwalk::print_metrics``."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from tango import Step
from tango.common.aliases import PathOrStr
from tango.common.logging import cli_logger
from tango.format import Format

from ..reports.accuracy import accuracies
from ..reports.averages import macro_average
from ..reports.calibration import calibration
from ..reports.generation import is_generation, score_averages
from ..reports.perplexity import document_perplexities, target_metrics
from ..reports.tables import MetricsTable, check_average_over
from ..storage.atomic import AtomicJsonFormat, read_json, replace_atomically
from ..tango_fixes.class_paths import keep_class_path


@Step.register("catwalk::calculate_metrics")
@keep_class_path("catwalk_steps.metrics.CalculateMetricsStep")
class CalculateMetricsStep(Step):
    """Accuracy of predictions from ``catwalk::predict``, ranking choices by summed
    log-likelihood (``acc``), per character of the answer text (``acc_norm``, as
    lm-evaluation-harness), per token (``acc_per_token``), and, where the predictions hold
    log-likelihoods after the task's unconditioned context (``unconditioned: true`` in
    ``catwalk::predict``), by the gain over it (``acc_uncond``); each with its standard error
    (``acc_stderr``, ...; see :mod:`..reports.averages`); and how well the softmax over each
    instance's summed log-likelihoods is calibrated: ``ece`` (top-label expected calibration
    error, 15 bins, L1) and ``brier`` (see :mod:`..reports.calibration`).

    Generation predictions (a generative task's) give the mean of each per-instance score
    (``exact_match``, ``f1``, ``exact_match/strict-match``, ...) with its standard error, and
    ``truncated``, the number of prompts cut to fit the model (:mod:`..reports.generation`).

    For a task with groups (MMLU's subjects), the top-level numbers are over all instances
    (lm-evaluation-harness's ``mmlu`` number), ``groups`` holds each group's metrics and
    ``macro`` their macro average.

    Perplexity tasks' records give ``word_perplexity``, ``byte_perplexity``, ``bits_per_byte``
    and ``token_perplexity``; records of targets scored with a greedy flag (LAMBADA) give ``acc``
    and ``perplexity`` (:mod:`..reports.perplexity`).

    Runs in one process, on the predictions as cached: there is nothing to sync across processes
    (the system this replaces synced torchmetrics objects across DDP workers in a callback).
    """

    # cw2: standard errors, groups; acc_norm per answer character (PredictStep cw2). cw3: ece, brier.
    VERSION = "cw3"
    FORMAT = AtomicJsonFormat()

    def run(self, predictions: List[Dict[str, Any]]) -> Dict[str, Any]:  # type: ignore[override]
        if not predictions:
            raise ValueError("No predictions to compute metrics on")
        metrics = metrics_of(predictions)
        by_group: Dict[str, List[Dict[str, Any]]] = {}
        for p in predictions:
            if "group" in p:
                by_group.setdefault(p["group"], []).append(p)
        if by_group:
            metrics["groups"] = {group: metrics_of(members) for group, members in sorted(by_group.items())}
            metrics["macro"] = macro_average(list(metrics["groups"].values()))
        self.logger.info("Metrics: %s", {k: v for k, v in metrics.items() if k != "groups"})
        return metrics


def metrics_of(predictions: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Every metric of ``predictions``: the accuracies with their standard errors, the
    calibration, the count; for generations, the mean scores with their standard errors; for
    documents and targets, their perplexities (and the targets' greedy accuracy)."""
    if is_generation(predictions[0]):
        return score_averages(predictions)
    if "num_bytes" in predictions[0]:
        return document_perplexities(predictions)
    if "is_greedy" in predictions[0]:
        return target_metrics(predictions)
    return {**accuracies(predictions), **calibration(predictions)}


@Format.register("catwalk::metrics_table")
@keep_class_path("catwalk_steps.metrics.MetricsTableFormat")
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
        data = read_json(Path(dir) / "table.json")
        return MetricsTable(data["columns"], data["rows"])


@Step.register("catwalk::tabulate_metrics")
@keep_class_path("catwalk_steps.metrics.TabulateMetricsStep")
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
@keep_class_path("catwalk_steps.metrics.PrintMetricsStep")
class PrintMetricsStep(Step):
    """Prints a table from ``catwalk::tabulate_metrics``. Not cached, so every run ends with
    the table, also when everything came from the cache."""

    CACHEABLE = False

    def run(self, table: MetricsTable, title: str = "Metrics") -> str:  # type: ignore[override]
        cli_logger.info(table.to_rich(title))
        return table.to_markdown()
