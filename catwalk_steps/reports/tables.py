"""One table of named metric results, rendered for the terminal, Markdown, CSV and JSON."""

import csv
import io
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from rich.table import Table
from tango.common.exceptions import ConfigurationError

from .averages import STDERR_SUFFIX, macro_average

MACRO_AVERAGE = "macro-average"


@dataclass
class MetricsTable:
    columns: List[str]
    rows: List[Dict[str, Any]]

    @classmethod
    def from_results(
        cls, results: Dict[str, Dict[str, Any]], key_columns: List[str], average_over: Optional[str] = None
    ) -> "MetricsTable":
        """One row per result; its name (``"piqa/gpt2/seed1"``) is split on ``/`` into ``key_columns``.

        With ``average_over`` (a key column, e.g. ``"task"``), the rows that agree on every other
        key column (one model, one setting) are followed by their macro average, a row whose
        ``average_over`` cell reads ``macro-average``. Nested results (a task's per-group
        metrics) stay in the metrics JSON, out of the table.
        """
        check_average_over(key_columns, average_over)
        metric_columns = sorted(
            {metric for result in results.values() for metric, value in result.items() if not isinstance(value, dict)},
            key=lambda name: (name == "count", name.removesuffix(STDERR_SUFFIX), name.endswith(STDERR_SUFFIX)),
        )
        groups: Dict[tuple, List[Dict[str, Any]]] = {}
        for name, result in results.items():
            parts = name.split("/") if len(key_columns) > 1 else [name]
            if len(parts) != len(key_columns):
                raise ConfigurationError(f"Result name {name!r} does not split into {'/'.join(key_columns)}")
            keys = dict(zip(key_columns, parts))
            row = {**keys, **{k: v for k, v in result.items() if k in metric_columns}}
            groups.setdefault(tuple(v for k, v in keys.items() if k != average_over), []).append(row)
        rows = []
        for members in groups.values():
            rows += members
            if average_over is not None:
                keys = {k: members[0][k] for k in key_columns if k != average_over}
                rows.append({**keys, average_over: MACRO_AVERAGE, **macro_average(members)})
        return cls(key_columns + metric_columns, rows)

    def display_columns(self) -> List[str]:
        """The columns people read: a standard error shares its accuracy's cell."""
        return [
            c for c in self.columns if not (c.endswith(STDERR_SUFFIX) and c.removesuffix(STDERR_SUFFIX) in self.columns)
        ]

    def text_columns(self) -> List[str]:
        """The columns that name a row (task, model, ...), as opposed to its numbers."""
        return [column for column in self.columns if any(isinstance(row.get(column), str) for row in self.rows)]

    def cells(self) -> List[List[str]]:
        return [[_cell(row.get(c), row.get(c + STDERR_SUFFIX)) for c in self.display_columns()] for row in self.rows]

    def to_rich(self, title: str = "Metrics") -> Table:
        table = Table(title=title)
        text = self.text_columns()
        for column in self.display_columns():
            table.add_column(column, justify="left" if column in text else "right")
        for cells in self.cells():
            table.add_row(*cells)
        return table

    def to_markdown(self) -> str:
        columns = self.display_columns()
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cells) + " |" for cells in self.cells()]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        return out.getvalue()


def check_average_over(key_columns: List[str], average_over: Optional[str]) -> None:
    if average_over is not None and average_over not in key_columns:
        raise ConfigurationError(f"average_over={average_over!r} is not one of the key columns {key_columns}")


def _cell(value: Any, stderr: Any = None) -> str:
    if isinstance(value, float):
        return f"{value:.4f} ± {stderr:.4f}" if isinstance(stderr, float) else f"{value:.4f}"
    return "" if value is None else str(value)
