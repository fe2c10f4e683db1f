"""A :class:`.tables.MetricsTable` printed at the terminal's width: a table too wide for it is
printed as several, each with the name columns (task, model, ...) and as many metric columns as
fit, so that no header or number is cut short (``token_perplexi…``) and every number stays beside
the name of its row. Where not even one metric fits beside the names, each row is a table of its
own, one metric a line."""

import io
import shutil
from typing import Iterator, List, Optional

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

from .tables import MetricsTable

#: A column's cost beyond its text: one space of padding each side and its right border.
COLUMN_EDGES = 3


def column_groups(table: MetricsTable, width: int) -> Optional[List[List[str]]]:
    """The displayed columns in groups that each fit ``width`` characters: the name columns in
    every group, the metric columns in order; None if the names and one metric do not fit."""
    columns, cells, text = table.display_columns(), table.cells(), table.text_columns()
    widths = {c: max([cell_len(c)] + [cell_len(row[n]) for row in cells]) + COLUMN_EDGES for n, c in enumerate(columns)}
    names = [c for c in columns if c in text]
    groups, group = [], []
    for column in (c for c in columns if c not in names):
        if group and 1 + sum(widths[c] for c in names + group + [column]) > width:  # 1: the left border
            groups.append(names + group)
            group = []
        group.append(column)
    groups.append(names + group)
    return None if any(1 + sum(widths[c] for c in g) > width for g in groups) else groups


class FittedTable:
    """What :class:`..steps.metrics.PrintMetricsStep` logs: rich renders it at the width of the
    console it is printed to, known only then."""

    def __init__(self, table: MetricsTable, title: str) -> None:
        self.table, self.title = table, title

    def __str__(self) -> str:
        """The table as text at this terminal's width: what a log handler that is not rich's
        writes (the step run in a worker process of ``tango run -j 2``, whose log lines are
        forwarded as text)."""
        console = Console(file=io.StringIO(), width=shutil.get_terminal_size().columns, color_system=None)
        console.print(self)
        return console.file.getvalue().rstrip("\n")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        groups = column_groups(self.table, options.max_width)
        if groups is None:
            yield from self.rows()
            return
        for n, columns in enumerate(groups):
            title = self.title if n == 0 else f"{self.title} (continued)"
            yield self.table.to_rich(title, columns, caption=n == len(groups) - 1)

    def rows(self) -> Iterator[Table]:
        """Each row as a table of its own, titled by its names, one metric a line."""
        columns, text = self.table.display_columns(), self.table.text_columns()
        for row in self.table.cells():
            names = "/".join(cell for column, cell in zip(columns, row) if column in text)
            table = Table(title=f"{self.title}: {names}", show_header=False)
            table.add_column(overflow="fold")
            table.add_column(justify="right", overflow="fold")
            for column, cell in zip(columns, row):
                if column not in text and cell:
                    table.add_row(column, cell)
            yield table
