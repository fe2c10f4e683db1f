"""``catwalk::export_predictions``: results in a directory a person opens, not a hashed cache dir."""

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..kinds import kind_of_records
from ..reports.charts import accuracy_chart
from ..reports.curves import has_history, training_chart
from ..reports.tables import MetricsTable
from ..storage.atomic import publish_text
from ..tango_fixes.class_paths import keep_class_path
from ..tracking.settings import WANDB_ARGUMENTS, check_tracking, run_identity, wandb_settings


def file_name(run: str) -> str:
    """A run name (``piqa/tiny/zero-shot``) as a file name (``piqa_tiny_zero-shot``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run).strip("_") or "_"


def check_output_dir(output_dir: str) -> None:
    """``output_dir`` is, or can be made, a writable directory."""
    existing = Path(output_dir)
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise ConfigurationError(f"output_dir {output_dir!r} cannot be written: {existing} is not a writable directory")


def readable_predictions(predictions: List[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
    """Each record of ``catwalk::predict`` as its kind shows it: a multiple-choice record plus,
    under every ranking, the choice it picks and whether that is the gold label; generation and
    perplexity records as they are (they say what was generated and how it scored, or have no
    choices)."""
    if predictions:
        yield from kind_of_records(predictions).readable(predictions)


@Step.register("catwalk::export_predictions")
@keep_class_path("catwalk_steps.export.ExportPredictionsStep")
class ExportPredictionsStep(Step):
    """Writes into ``output_dir`` (a path the config names, relative to where ``tango run``
    runs), each file replaced atomically:

    - ``predictions/<run>.jsonl``: per instance its id, gold label, per-choice log-likelihoods,
      token and character counts, ``margin``, and under ``chosen`` and ``correct`` the choice
      each metric picks and whether it is right; for a generative task, per instance the
      generation, its references and its scores;
    - ``metrics.csv`` and ``metrics.md``: the table from ``catwalk::tabulate_metrics``;
    - ``<chart>.png`` with ``chart`` set to a metric of the table (e.g. ``"acc"``): that metric
      per row, with standard-error bars;
    - ``training.png`` with ``training`` (run name -> a ``catwalk::finetune`` step): the training
      loss and the validation accuracy against the step, one line per fine-tuned model;
    - with ``wandb_project``, the table and the charts also go to a W&B run
      (:mod:`catwalk_steps.tracking.results`; W&B's local files in ``wandb/`` there).

    Not cached: writing is cheap, and a deleted or edited file comes back on the next run.
    """

    CACHEABLE = False
    # The key of an export without curves or W&B is unchanged.
    SKIP_DEFAULT_ARGUMENTS = {"training": None, **{name: None for name in WANDB_ARGUMENTS}}

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Settings are checked when the step graph is built, before any step of a run starts."""
        check_output_dir(kwargs.get("output_dir", ""))
        names: Dict[str, str] = {}
        for run in kwargs.get("predictions") or {}:
            clash = names.setdefault(file_name(run), run)
            if clash != run:
                raise ConfigurationError(f"Runs {clash!r} and {run!r} would both be written to {file_name(run)}.jsonl")
        if kwargs.get("chart") is not None and kwargs.get("table") is None:
            raise ConfigurationError("chart needs a table to draw from")
        check_tracking(kwargs)
        return kwargs

    def run(  # type: ignore[override]
        self,
        output_dir: str,
        predictions: Optional[Dict[str, List[Dict[str, Any]]]] = None,
        table: Optional[MetricsTable] = None,
        chart: Optional[str] = None,
        training: Optional[Dict[str, Any]] = None,
        wandb_project: Optional[str] = None,
        wandb_entity: Optional[str] = None,
        wandb_group: Optional[str] = None,
        wandb_tags: Optional[List[str]] = None,
        wandb_name: Optional[str] = None,
    ) -> str:
        """
        :param output_dir: where the files go; created if missing.
        :param predictions: results of ``catwalk::predict``, by run name.
        :param table: a result of ``catwalk::tabulate_metrics``.
        :param chart: a metric of ``table`` to draw, e.g. ``"acc"``.
        :param training: fine-tuned models (results of ``catwalk::finetune``) by run name, whose
            training curves to draw into ``training.png``.
        :param wandb_project: also send the table and the charts to this W&B project (needs the
            ``wandb`` extra); the run id is derived from this step's and ``output_dir``, so a
            rerun updates the same W&B run.
        :param wandb_entity: the W&B team or user (default: yours).
        :param wandb_group: the W&B group, e.g. the fine-tunes' group.
        :param wandb_tags: W&B tags of the run.
        :param wandb_name: the W&B run's display name (default: the step's name).
        :returns: the directory written, as an absolute path.
        """
        out = Path(output_dir).resolve()
        out.mkdir(parents=True, exist_ok=True)
        for run, records in (predictions or {}).items():
            (out / "predictions").mkdir(exist_ok=True)
            lines = "".join(json.dumps(record) + "\n" for record in readable_predictions(records))
            publish_text(out / "predictions" / f"{file_name(run)}.jsonl", lines)
        if table is not None:
            publish_text(out / "metrics.csv", table.to_csv())
            publish_text(out / "metrics.md", table.to_markdown())
        charts = []
        if chart is not None:
            charts.append(out / f"{chart}.png")
            accuracy_chart(table, chart, charts[-1])
        if training:
            curves = {run: getattr(model, "training_metrics", model) for run, model in training.items()}
            if any(has_history(metrics) for metrics in curves.values()):
                charts.append(out / "training.png")
                training_chart(curves, charts[-1])
        if wandb_project is not None:
            from ..tracking.results import publish_results  # wandb: only when asked for

            settings = wandb_settings(wandb_project, wandb_entity, wandb_group, wandb_tags)
            publish_results(settings, run_identity(self, out, wandb_name), table, charts)
        self.logger.info("Results written to %s", out)
        return str(out)
