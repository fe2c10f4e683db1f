"""One table of named metric results, rendered for the terminal, Markdown, CSV and JSON."""

import csv
import io
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from rich.table import Table
from tango.common.exceptions import ConfigurationError

from .averages import STDERR_SUFFIX, macro_average

MACRO_AVERAGE = "macro-average"
#: The shots of a result's prompts (``catwalk::calculate_metrics``): a column, first of the
#: numbers, where any row's prompts held demonstrations.
SHOTS = "num_shots"

# Columns that paired comparisons (:mod:`.table_comparisons`) and seed replicates
# (:mod:`.replicates`) add for a metric ``m``; the CSV and JSON keep them all, the printed and
# Markdown tables fold them into a few cells.
SEED_SPREAD = ("_seed_sd", "_seed_min", "_seed_max")


def delta_column(metric: str, part: str = "") -> str:
    """``delta_acc`` (candidate - baseline), ``delta_acc_ci_low``, ``delta_acc_ci_high``."""
    return f"delta_{metric}{part}"


def p_column(metric: str, corrected: bool = True) -> str:
    """``p_acc``, Holm-corrected across the table's comparisons; ``p_acc_uncorrected``."""
    return f"p_{metric}" if corrected else f"p_{metric}_uncorrected"


def row_keys(name: str, key_columns: List[str]) -> Dict[str, str]:
    """A result's name (``"piqa/gpt2/seed1"``) split on ``/`` into ``key_columns``, the last
    keeping any ``/`` more (a model's path: ``"piqa/rc::data/tiny/model"``)."""
    parts = name.split("/", len(key_columns) - 1)
    if len(parts) != len(key_columns):
        raise ConfigurationError(f"Result name {name!r} does not split into {'/'.join(key_columns)}")
    return dict(zip(key_columns, parts))


DETAIL_PREFIXES = ("delta_", "p_", "wins_", "losses_", "seed_sd_of_delta_")


@dataclass
class MetricsTable:
    columns: List[str]
    rows: List[Dict[str, Any]]
    caption: str = ""

    @classmethod
    def from_results(
        cls, results: Dict[str, Dict[str, Any]], key_columns: List[str], average_over: Optional[str] = None
    ) -> "MetricsTable":
        """One row per result; its name (``"piqa/gpt2/seed1"``) is split on ``/`` into ``key_columns``
        (:func:`row_keys`).

        With ``average_over`` (a key column, e.g. ``"task"``), the rows that agree on every other
        key column (one model, one setting) are followed by their macro average, a row whose
        ``average_over`` cell reads ``macro-average``. Nested results (a task's per-group
        metrics) stay in the metrics JSON, out of the table.
        """
        check_average_over(key_columns, average_over)
        metric_columns = sorted(
            {metric for result in results.values() for metric, value in result.items() if not isinstance(value, dict)},
            key=lambda name: (name != SHOTS, name == "count", name.removesuffix(STDERR_SUFFIX),
                              name.endswith(STDERR_SUFFIX)),
        )
        if not any(result.get(SHOTS) for result in results.values()):  # all zero-shot: nothing to say
            metric_columns = [name for name in metric_columns if name != SHOTS]
        groups: Dict[tuple, List[Dict[str, Any]]] = {}
        for name, result in results.items():
            keys = row_keys(name, key_columns)
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
        """The columns people read: a standard error shares its accuracy's cell, a seed spread its
        mean's; a comparison shows as ``Δ <metric> [95% CI]`` and ``p`` for the metric of the first
        delta column (:meth:`compared_metric`)."""
        shown = [
            c for c in self.columns
            if not (c.endswith(STDERR_SUFFIX) and c.removesuffix(STDERR_SUFFIX) in self.columns)
            and not c.endswith(SEED_SPREAD) and not c.startswith(DETAIL_PREFIXES) and c != "seeds"
        ]
        compared = self.compared_metric()
        return shown + ([f"Δ {compared} [95% CI]", "p"] if compared else [])

    def compared_metric(self) -> Optional[str]:
        """The metric of the first delta column, if it is a column of the table: the comparisons
        (:mod:`.table_comparisons`) put the request kinds' headline metric first."""
        metric_of = {delta_column(c): c for c in self.columns}
        return next((metric_of[c] for c in self.columns if c in metric_of), None)

    def text_columns(self) -> List[str]:
        """The columns that name a row (task, model, ...), as opposed to its numbers."""
        return [column for column in self.columns if any(isinstance(row.get(column), str) for row in self.rows)]

    def cells(self) -> List[List[str]]:
        compared = self.compared_metric()
        return [
            [
                _delta_cell(row, compared) if c.startswith("Δ ")
                else _p_cell(row.get(p_column(compared))) if c == "p" and compared
                else _cell(row.get(c), row.get(c + STDERR_SUFFIX), [row.get(c + part) for part in SEED_SPREAD])
                for c in self.display_columns()
            ]
            for row in self.rows
        ]

    def to_rich(self, title: str = "Metrics", columns: Optional[Sequence[str]] = None, caption: bool = True) -> Table:
        """The table for the terminal, of ``columns`` (by default every displayed column) only.
        Names stay whole; a number folds rather than being cut (:mod:`.terminal` splits a table
        too wide for the terminal)."""
        table = Table(title=title, caption=(self.caption if caption else "") or None, caption_justify="left")
        text = self.text_columns()
        shown = self.display_columns()
        cells = self.cells()
        for n, column in enumerate(shown):
            if columns is not None and column not in columns:
                continue
            if column in text:  # names stay whole: the numbers wrap first when the terminal is narrow
                table.add_column(column, justify="left", min_width=max([len(row[n]) for row in cells] + [len(column)]))
            else:
                table.add_column(column, justify="right", overflow="fold")
        for row in cells:
            table.add_row(*[cell for column, cell in zip(shown, row) if columns is None or column in columns])
        return table

    def to_markdown(self) -> str:
        columns = self.display_columns()
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cells) + " |" for cells in self.cells()]
        return "\n".join(lines) + "\n" + (f"\n{self.caption}\n" if self.caption else "")

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        return out.getvalue()


def check_average_over(key_columns: List[str], average_over: Optional[str]) -> None:
    if average_over is not None and average_over not in key_columns:
        raise ConfigurationError(f"average_over={average_over!r} is not one of the key columns {key_columns}")


def _cell(value: Any, stderr: Any = None, spread: Sequence[Any] = ()) -> str:
    """``0.6250 ± 0.0430`` (± a standard error); a mean over seeds as ``0.6250 (sd 0.0100,
    0.6100–0.6400)``."""
    if isinstance(value, float) and spread and isinstance(spread[0], float):
        sd, low, high = spread
        return f"{value:.4f} (sd {sd:.4f}, {low:.4f}–{high:.4f})"
    if isinstance(value, float):
        return f"{value:.4f} ± {stderr:.4f}" if isinstance(stderr, float) else f"{value:.4f}"
    return "" if value is None else str(value)


def _delta_cell(row: Dict[str, Any], metric: str) -> str:
    """``+0.0391 [+0.0156, +0.0625]``; for a mean over seeds, the mean of the seeds' deltas and
    their standard deviation, flagged when the delta is not larger than that spread."""
    delta = row.get(delta_column(metric))
    if not isinstance(delta, float):
        return ""
    low, high = row.get(delta_column(metric, "_ci_low")), row.get(delta_column(metric, "_ci_high"))
    if isinstance(low, float):
        return f"{delta:+.4f} [{low:+.4f}, {high:+.4f}]"
    sd = row.get("seed_sd_of_" + delta_column(metric))
    within = " ≤ seed spread" if isinstance(sd, float) and abs(delta) <= sd else ""
    return f"{delta:+.4f} (seed sd {sd:.4f}{within})" if isinstance(sd, float) else f"{delta:+.4f}"


def _p_cell(p: Any) -> str:
    if not isinstance(p, float):
        return ""
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"
