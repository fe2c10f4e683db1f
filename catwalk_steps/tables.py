"""One table of named metric results, rendered for the terminal, Markdown, CSV and JSON."""

import csv
import io
from dataclasses import dataclass
from typing import Any, Dict, List

from rich.table import Table
from tango.common.exceptions import ConfigurationError


@dataclass
class MetricsTable:
    columns: List[str]
    rows: List[Dict[str, Any]]

    @classmethod
    def from_results(cls, results: Dict[str, Dict[str, Any]], key_columns: List[str]) -> "MetricsTable":
        """One row per result; its name (``"piqa/gpt2/seed1"``) is split on ``/`` into ``key_columns``."""
        metric_columns = sorted({metric for result in results.values() for metric in result})
        rows = []
        for name, result in results.items():
            parts = name.split("/") if len(key_columns) > 1 else [name]
            if len(parts) != len(key_columns):
                raise ConfigurationError(f"Result name {name!r} does not split into {'/'.join(key_columns)}")
            rows.append({**dict(zip(key_columns, parts)), **result})
        return cls(key_columns + metric_columns, rows)

    def text_columns(self) -> List[str]:
        """The columns that name a row (task, model, ...), as opposed to its numbers."""
        return [column for column in self.columns if any(isinstance(row.get(column), str) for row in self.rows)]

    def cells(self) -> List[List[str]]:
        return [[_cell(row.get(column)) for column in self.columns] for row in self.rows]

    def to_rich(self, title: str = "Metrics") -> Table:
        table = Table(title=title)
        text = self.text_columns()
        for column in self.columns:
            table.add_column(column, justify="left" if column in text else "right")
        for cells in self.cells():
            table.add_row(*cells)
        return table

    def to_markdown(self) -> str:
        lines = ["| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(cells) + " |" for cells in self.cells()]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        return out.getvalue()


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)
