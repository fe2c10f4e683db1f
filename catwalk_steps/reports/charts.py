"""A bar chart of one accuracy per row of a metrics table, with standard-error bars: a sweep is
read faster from a picture than from 30 rows of numbers."""

import math
from pathlib import Path
from typing import Any, Dict, List, Tuple

from tango.common.exceptions import ConfigurationError

from ..storage.atomic import publish_file
from .averages import PLAIN_METRICS
from .tables import MetricsTable


def binomial_stderr(accuracy: float, count: int) -> float:
    """The standard error of an accuracy over ``count`` instances, sqrt(p(1-p)/(n-1)), as
    lm-evaluation-harness reports it (``acc_stderr``); NaN (no error bar) below 2 instances."""
    return math.sqrt(accuracy * (1 - accuracy) / (count - 1)) if count and count > 1 else math.nan


def stderr_of(row: Dict[str, Any], metric: str) -> float:
    """The table's own ``<metric>_stderr`` where it has one, else the binomial one for an
    accuracy; NaN (no error bar) for a metric without one (``ece``, ``brier``)."""
    given = row.get(f"{metric}_stderr")
    if isinstance(given, (int, float)):
        return given
    return math.nan if metric in PLAIN_METRICS else binomial_stderr(row[metric], row.get("count") or 0)


def error_bar(row: Dict[str, Any], metric: str) -> Tuple[float, float]:
    """How far the bar's whisker reaches below and above the value: a mean over seeds spans its
    seeds' min to max (the seed spread), any other row its standard error."""
    low, high = row.get(f"{metric}_seed_min"), row.get(f"{metric}_seed_max")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return row[metric] - low, high - row[metric]
    error = stderr_of(row, metric)
    return error, error


def accuracy_chart(table: MetricsTable, metric: str, path: Path) -> None:
    """Writes a PNG of ``metric`` per row: grouped by the first column that names rows (e.g.
    the task) when several do, one coloured bar per value of the others (model, fine-tuning,
    seed, ...), each with its standard error (a mean over seeds: its seeds' min to max). Rows
    without the metric are left out."""
    if metric not in table.columns:
        raise ConfigurationError(f"The table has no column {metric!r} to chart; it has {', '.join(table.columns)}")
    # Imported here: it costs every `tango run` start-up time, and only this function needs it.
    # The Figure API draws with Agg and touches no global backend state (pyplot would).
    from matplotlib.figure import Figure

    names = table.text_columns()
    group_by, series_by = (names[0], names[1:]) if len(names) > 1 else (None, names)
    rows = [row for row in table.rows if isinstance(row.get(metric), (int, float))]

    def group_of(row: Dict[str, Any]) -> str:
        return str(row[group_by]) if group_by else metric

    def series_of(row: Dict[str, Any]) -> str:
        return "/".join(str(row[column]) for column in series_by)

    groups: List[str] = list(dict.fromkeys(map(group_of, rows)))
    series: List[str] = list(dict.fromkeys(map(series_of, rows)))

    width = 0.8 / max(1, len(series))
    fig = Figure(figsize=(max(5.0, 1.0 + len(groups) * len(series) * 0.45), 4.5), layout="constrained")
    ax = fig.subplots()
    for n, name in enumerate(series):
        points = [
            (groups.index(group_of(row)), row[metric], error_bar(row, metric)) for row in rows if series_of(row) == name
        ]
        bars = ax.bar(
            [g - 0.4 + width * (n + 0.5) for g, _, _ in points], [v for _, v, _ in points], width,
            yerr=[[e[0] for _, _, e in points], [e[1] for _, _, e in points]], capsize=3, label=name,
        )
        ax.bar_label(bars, fmt="%.2f", label_type="center", rotation=90, fontsize=7, color="white")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 1.1)
    whiskers = [] if metric in PLAIN_METRICS else ["± standard error"]
    whiskers += ["seed means: min–max"] if any(f"{metric}_seed_min" in row for row in rows) else []
    ax.set_ylabel(f"{metric} ({'; '.join(whiskers)})" if whiskers else metric)
    ax.set_title(f"{metric} per {group_by}" if group_by else metric)
    ax.legend(title="/".join(series_by), fontsize=7, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    publish_file(path, lambda temp: fig.savefig(temp, format="png", dpi=120))
