"""Seeds as replicates: fine-tuning results move with the seed (data order, dropout), often by
more than the gap between two methods, so a setting run with several seeds gets a row of its
mean over seeds, their standard deviation and their range, beside (not instead of) each seed's
row."""

from typing import Any, Dict, Iterable, List, Tuple

import numpy as np
from tango.common.exceptions import ConfigurationError

from .averages import STDERR_SUFFIX
from .tables import SEED_SPREAD, MetricsTable, row_keys

#: The replicate column's value in a row of means over replicates.
MEAN_OVER_SEEDS = "mean"


def setting_of(keys: Dict[str, Any], key_columns: List[str], replicates: str) -> Tuple[Any, ...]:
    """A row's key values but its replicate's: the rows of one setting share it."""
    return tuple(keys[c] for c in key_columns if c != replicates)


def check_replicates(names: Iterable[str], key_columns: List[str], replicates: str) -> None:
    """``replicates`` is a key column, and at least one setting has several values of it."""
    if replicates not in key_columns:
        raise ConfigurationError(f"replicates={replicates!r} is not one of the key columns {key_columns}")
    counts: Dict[Tuple[Any, ...], int] = {}
    for name in names:
        setting = setting_of(row_keys(name, key_columns), key_columns, replicates)
        counts[setting] = counts.get(setting, 0) + 1
    if not any(count > 1 for count in counts.values()):
        raise ConfigurationError(
            f"A spread over {replicates!r} was asked for, but no setting of the table has more than one "
            f"{replicates}: run at least two (e.g. seeds: [1, 2]) or leave replicates out"
        )


def add_replicate_rows(table: MetricsTable, key_columns: List[str], replicates: str) -> MetricsTable:
    """The table with each setting's rows together, followed, where there are several, by a row
    whose ``replicates`` cell reads ``mean``: each metric's mean over them, with
    ``<metric>_seed_sd`` (sample standard deviation), ``_seed_min``, ``_seed_max``, and ``seeds``
    (how many)."""
    check_replicates(
        ["/".join(str(row[c]) for c in key_columns) for row in table.rows], key_columns, replicates
    )
    groups: Dict[Tuple[Any, ...], List[Dict[str, Any]]] = {}
    for row in table.rows:
        groups.setdefault(setting_of(row, key_columns, replicates), []).append(row)
    metrics = [
        c for c in table.columns
        if c not in key_columns and not c.endswith(STDERR_SUFFIX) and c != "count"
    ]
    rows: List[Dict[str, Any]] = []
    spread_columns: List[str] = []
    for members in groups.values():
        rows += members
        if len(members) < 2:
            continue
        summary: Dict[str, Any] = {c: members[0][c] for c in key_columns}
        summary[replicates] = MEAN_OVER_SEEDS
        for metric in metrics:
            values = np.array([row[metric] for row in members if isinstance(row.get(metric), (int, float))])
            if len(values) < 2:
                continue
            summary[metric] = float(values.mean())
            for suffix, value in zip(SEED_SPREAD, (values.std(ddof=1), values.min(), values.max())):
                summary[metric + suffix] = float(value)
                if metric + suffix not in spread_columns:
                    spread_columns.append(metric + suffix)
        counts = {row.get("count") for row in members}
        summary["count"] = counts.pop() if len(counts) == 1 else None
        summary["seeds"] = len(members)
        rows.append(summary)
    columns = table.columns + spread_columns + ["seeds"]
    return MetricsTable(columns, rows, table.caption)
