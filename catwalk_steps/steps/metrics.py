"""``catwalk::calculate_metrics``, ``catwalk::tabulate_metrics`` and ``catwalk::print_metrics``."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from tango import Step
from tango.common.aliases import PathOrStr
from tango.common.exceptions import ConfigurationError
from tango.common.logging import cli_logger
from tango.format import Format

from ..kinds import kind_of_records
from ..reports.averages import macro_average
from ..reports.replicates import add_replicate_rows, check_replicates
from ..reports.table_comparisons import add_comparisons, check_baseline
from ..reports.tables import MetricsTable, check_average_over
from ..reports.terminal import FittedTable
from ..storage.atomic import AtomicJsonFormat, publish_text, read_json
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
        if "num_shots" in predictions[0]:  # predictions cached before records held it do not say
            metrics["num_shots"] = predictions[0]["num_shots"]
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
    """Every metric of ``predictions``, as their kind computes them (:mod:`..kinds`): the
    accuracies with their standard errors, the calibration, the count; for generations, the mean
    scores with their standard errors; for documents and targets, their perplexities (and the
    targets' greedy accuracy)."""
    return kind_of_records(predictions).metrics(predictions)


@Format.register("catwalk::metrics_table")
@keep_class_path("catwalk_steps.metrics.MetricsTableFormat")
class MetricsTableFormat(Format[MetricsTable]):
    """``table.json`` (read back), plus ``table.md`` and ``table.csv`` for people and spreadsheets."""

    VERSION = "1"

    def write(self, artifact: MetricsTable, dir: PathOrStr) -> None:
        dir = Path(dir)
        publish_text(dir / "table.md", artifact.to_markdown())
        publish_text(dir / "table.csv", artifact.to_csv())
        data = {"columns": artifact.columns, "rows": artifact.rows}
        if artifact.caption:
            data["caption"] = artifact.caption
        publish_text(dir / "table.json", json.dumps(data, indent=1))

    def read(self, dir: PathOrStr) -> MetricsTable:
        data = read_json(Path(dir) / "table.json")
        return MetricsTable(data["columns"], data["rows"], data.get("caption", ""))


@Step.register("catwalk::tabulate_metrics")
@keep_class_path("catwalk_steps.metrics.TabulateMetricsStep")
class TabulateMetricsStep(Step):
    """Gathers many metric results, keyed by names like ``task/model/seed``, into one table,
    cached as Markdown, CSV and JSON. ``key_columns`` names the parts of those keys;
    ``average_over`` (e.g. ``"task"``) adds a macro-average row for each combination of the
    other key columns; ``replicates`` (e.g. ``"seed"``) a row of the mean, standard deviation,
    min and max over it for each setting run several times (:mod:`..reports.replicates`);
    ``baseline`` with ``predictions`` paired comparisons with a baseline row
    (:mod:`..reports.table_comparisons`)."""

    # cw2: standard-error columns, macro averages. cw3: a comparison's Δ shows the request kinds' headline
    # metric (the one a diff lists), not the first by name: a table cached before may show another.
    VERSION = "cw3"
    FORMAT = MetricsTableFormat()
    # Tables without comparisons or replicates keep the keys they had before these existed.
    SKIP_DEFAULT_ARGUMENTS = {"baseline": None, "predictions": None, "replicates": None}

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        key_columns = kwargs.get("key_columns") or ["run"]
        check_average_over(key_columns, kwargs.get("average_over"))
        names = list(kwargs.get("metrics") or {})
        if kwargs.get("replicates") is not None:
            check_replicates(names, key_columns, kwargs["replicates"])
        if kwargs.get("baseline") is not None:
            check_baseline(names, key_columns, kwargs["baseline"], kwargs.get("replicates"))
            missing = [name for name in names if name not in (kwargs.get("predictions") or {})]
            if missing:
                raise ConfigurationError(
                    f"baseline needs the predictions of every row of the table; missing: {', '.join(missing)}"
                )
        return kwargs

    def run(  # type: ignore[override]
        self,
        metrics: Dict[str, Dict[str, Any]],
        key_columns: Optional[List[str]] = None,
        average_over: Optional[str] = None,
        replicates: Optional[str] = None,
        baseline: Optional[str] = None,
        predictions: Optional[Dict[str, List[Dict[str, Any]]]] = None,
    ) -> MetricsTable:
        """
        :param replicates: a key column (``"seed"``) whose values are replicates of one setting.
        :param baseline: a row name without its ``task`` and ``replicates`` parts, e.g.
            ``"tiny/zero-shot/-/-"``; every other row of the same task is compared with it.
        :param predictions: each row's ``catwalk::predict`` result, by row name (for ``baseline``).
        """
        key_columns = key_columns or ["run"]
        table = MetricsTable.from_results(metrics, key_columns, average_over)
        if replicates is not None:
            table = add_replicate_rows(table, key_columns, replicates)
        if baseline is not None:
            table = add_comparisons(table, key_columns, predictions or {}, baseline, kind_of_records, replicates)
        return table


@Step.register("catwalk::print_metrics")
@keep_class_path("catwalk_steps.metrics.PrintMetricsStep")
class PrintMetricsStep(Step):
    """Prints a table from ``catwalk::tabulate_metrics``. Not cached, so every run ends with
    the table, also when everything came from the cache."""

    CACHEABLE = False

    def run(self, table: MetricsTable, title: str = "Metrics") -> str:  # type: ignore[override]
        cli_logger.info(FittedTable(table, title))  # as wide as the terminal it is printed to
        return table.to_markdown()
