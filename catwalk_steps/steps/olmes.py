"""``catwalk::olmes_table``: OLMES's core-suite table, per task the cloze (RC) and the lettered
(MC) variant's primary score and the better of the two, and their macro averages."""

from typing import Any, Dict

from tango import Step

from ..reports.olmes import check_olmes_rows, olmes_table
from ..reports.tables import MetricsTable
from .metrics import MetricsTableFormat


@Step.register("catwalk::olmes_table")
class OlmesTableStep(Step):
    """``metrics``: ``catwalk::calculate_metrics`` results of ``olmes`` tasks, by row name
    ``model/task/rc`` and ``model/task/mc`` (what ``lib.olmes`` builds). Each cell is a
    variant's ``primary_score``; ``best`` is the better of a task's two, as OLMES reports its
    core tasks; each model's last row is the macro average over its tasks."""

    VERSION = "1"
    FORMAT = MetricsTableFormat()

    @classmethod
    def massage_kwargs(cls, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        check_olmes_rows(list(kwargs.get("metrics") or {}))
        return kwargs

    def run(self, metrics: Dict[str, Dict[str, Any]]) -> MetricsTable:  # type: ignore[override]
        return olmes_table(metrics)
