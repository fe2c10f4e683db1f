"""A table's rows compared with its baseline row, paired on the instances both scored.

Every row of the same task as the baseline gets, per metric, the difference to the baseline
with its paired-bootstrap 95% interval and a paired test's p-value (:mod:`.pairing`), the
p-values Holm-corrected across the table's comparisons (one family per metric). With seeds as
replicates (:mod:`.replicates`), a seed's row is compared with the baseline's row of the same
seed when the baseline has several seeds (else with its one row), and a setting's mean row gets
the mean of its seeds' differences and their standard deviation: a difference within the seed
spread is flagged as such."""

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Sequence

import numpy as np
from tango.common.exceptions import ConfigurationError

from .comparison import RESAMPLES, holm
from .pairing import PerInstance, compare_predictions
from .replicates import MEAN_OVER_SEEDS
from .tables import MetricsTable, delta_column, p_column, row_keys

TASK_COLUMN = "task"


class ComparedKind(PerInstance, Protocol):
    """What a table's comparisons need of a request kind (``catwalk_steps.kinds``): its records'
    per-instance metrics, and the one its ``Δ`` column shows."""

    def headline_metric(self, records: Sequence[Mapping[str, Any]]) -> Optional[str]: ...


def baseline_label(keys: Mapping[str, Any], key_columns: List[str], replicates: Optional[str]) -> str:
    """How ``baseline`` names a row: its name without its task (one baseline serves every task)
    and without its replicate (seed)."""
    return "/".join(str(keys[c]) for c in key_columns if c not in (TASK_COLUMN, replicates))


def check_baseline(names: Iterable[str], key_columns: List[str], baseline: str, replicates: Optional[str]) -> None:
    """``baseline`` names rows of the table (result names split into ``key_columns``)."""
    labels = []
    for name in names:
        keys = row_keys(name, key_columns)
        labels.append(baseline_label(keys, key_columns, replicates))
    if baseline not in labels:
        left_out = [c for c in key_columns if c in (TASK_COLUMN, replicates)]
        how = f" (named without its {' and '.join(left_out)})" if left_out else ""
        raise ConfigurationError(
            f"baseline {baseline!r} is not a row of the table{how}; its rows are: {', '.join(dict.fromkeys(labels))}"
        )


def add_comparisons(
    table: MetricsTable,
    key_columns: List[str],
    predictions: Mapping[str, List[Dict[str, Any]]],
    baseline: str,
    kind_of: Callable[[List[Dict[str, Any]]], ComparedKind],
    replicates: Optional[str] = None,
    seed: int = 0,
) -> MetricsTable:
    """``table`` with ``delta_<m>``, ``delta_<m>_ci_low``/``_ci_high``, ``p_<m>`` (Holm),
    ``p_<m>_uncorrected`` and, for 0/1 metrics, ``wins_<m>``/``losses_<m>`` on every compared
    row, and a caption saying how. ``predictions`` holds each row's records by row name;
    ``kind_of`` gives records' kind, which says their per-instance metrics and which of them the
    table's ``Δ`` column shows (its ``headline_metric``, the metric a diff lists by default)."""
    check_baseline(predictions, key_columns, baseline, replicates)
    rows = [dict(row) for row in table.rows]

    def name(row: Dict[str, Any]) -> str:
        return "/".join(str(row[c]) for c in key_columns)

    def is_baseline(row: Dict[str, Any]) -> bool:
        return baseline_label(row, key_columns, replicates) == baseline

    compared: List[Dict[str, Any]] = []
    tests: Dict[str, str] = {}  # each compared metric's test
    headlines: List[str] = []  # the rows' kinds' headline metrics, in row order, once each
    for row in rows:
        if name(row) not in predictions or is_baseline(row):
            continue
        base = _baseline_row(row, [r for r in rows if is_baseline(r) and name(r) in predictions], replicates)
        kind = kind_of(predictions[name(row)])
        result = compare_predictions(kind, predictions[name(base)], predictions[name(row)], seed=seed)
        tests.update((metric, c["test"]) for metric, c in result["metrics"].items())
        headline = kind.headline_metric(predictions[name(row)])
        if headline in result["metrics"] and headline not in headlines:
            headlines.append(headline)
        for metric, c in result["metrics"].items():
            row[delta_column(metric)] = c["delta"]
            row[delta_column(metric, "_ci_low")] = c["ci_low"]
            row[delta_column(metric, "_ci_high")] = c["ci_high"]
            row[p_column(metric, corrected=False)] = c["p_value"]
            if "wins" in c:
                row[f"wins_{metric}"], row[f"losses_{metric}"] = c["wins"], c["losses"]
        compared.append(row)
    if not compared:
        raise ConfigurationError(f"No row of the table but the baseline {baseline!r} has predictions to compare")
    # The kinds' headline metrics first: their delta columns come first, and the table's Δ shows
    # the first (MetricsTable.compared_metric), the metric a diff lists by default.
    metrics = headlines + sorted(set(tests) - set(headlines))
    for metric in metrics:
        family = [row for row in compared if p_column(metric, corrected=False) in row]
        for row, p in zip(family, holm([row[p_column(metric, corrected=False)] for row in family])):
            row[p_column(metric)] = p
    if replicates:
        _add_seed_deltas(rows, key_columns, replicates, metrics)

    new_columns = [
        column
        for metric in metrics
        for column in (
            delta_column(metric), delta_column(metric, "_ci_low"), delta_column(metric, "_ci_high"),
            p_column(metric), p_column(metric, corrected=False), f"wins_{metric}", f"losses_{metric}",
            "seed_sd_of_" + delta_column(metric),
        )
        if any(column in row for row in rows)
    ]
    compared_table = MetricsTable(table.columns + new_columns, rows)
    shown = compared_table.compared_metric() or metrics[0]
    caption = _caption(baseline, shown, tests[shown], metrics, len(compared), seed, replicates)
    compared_table.caption = "\n".join(filter(None, [table.caption, caption]))
    return compared_table


def _baseline_row(row: Dict[str, Any], candidates: List[Dict[str, Any]], replicates: Optional[str]) -> Dict[str, Any]:
    """The baseline row ``row`` is compared with: the same task's, and the same seed's when the
    baseline has several seeds."""
    same_task = [b for b in candidates if TASK_COLUMN not in row or b.get(TASK_COLUMN) == row[TASK_COLUMN]]
    if len(same_task) > 1 and replicates:
        same_task = [b for b in same_task if b.get(replicates) == row.get(replicates)]
    if len(same_task) != 1:
        where = f" for task {row[TASK_COLUMN]!r}" if TASK_COLUMN in row else ""
        seed = f" and {replicates} {row.get(replicates)!r}" if replicates else ""
        raise ConfigurationError(f"The baseline has {len(same_task) or 'no'} rows{where}{seed} to compare with")
    return same_task[0]


def _add_seed_deltas(rows: List[Dict[str, Any]], key_columns: List[str], replicates: str, metrics: List[str]) -> None:
    """A mean-over-seeds row gets the mean of its seeds' deltas and their standard deviation."""
    for summary in (row for row in rows if row.get(replicates) == MEAN_OVER_SEEDS):
        setting = [c for c in key_columns if c != replicates]
        seeds = [
            row for row in rows
            if row.get(replicates) != MEAN_OVER_SEEDS and all(row[c] == summary[c] for c in setting)
        ]
        for metric in metrics:
            deltas = np.array([row[delta_column(metric)] for row in seeds if delta_column(metric) in row])
            if len(deltas) > 1:
                summary[delta_column(metric)] = float(deltas.mean())
                summary["seed_sd_of_" + delta_column(metric)] = float(deltas.std(ddof=1))


def _caption(
    baseline: str, shown: str, test: str, metrics: List[str], count: int, seed: int, replicates: Optional[str]
) -> str:
    others = [m for m in metrics if m != shown]
    lines = [
        f"Δ {shown}: each row minus the baseline {baseline!r}, paired on the same instances;",
        f"95% CI: paired bootstrap ({RESAMPLES:,} resamples of the instances, seed {seed});",
        f"p: two-sided {test} test, Holm-corrected across the table's {count} comparisons.",
    ]
    if others:
        lines.append(f"The CSV and JSON also compare {', '.join(others)} (each its own Holm family).")
    if replicates:
        lines.append(
            f"A mean over {replicates}s: the mean of its {replicates}s' Δ and their standard deviation "
            f"(\"≤ seed spread\" when the Δ is no larger)."
        )
    text = "\n".join(lines)
    return text
