"""OLMES's names for the multiple-choice accuracies, and a task's primary score, for records of
a task that names its primary metric (OLMES's: ``catwalk_steps.tasks.olmes``).

OLMES ranks choices by summed log-likelihood (``acc_raw``), per character of the continuation
(``acc_per_char``: its whole length, the leading space included), per token
(``acc_per_token``) and by the gain over the continuation after ``Answer:`` alone
(``acc_uncond``). An OLMES task's instances have no target delimiter, so their records'
``num_chars`` is the continuation's whole length, and ``acc_per_char`` is what ``acc_norm``
computes of them."""

from typing import Any, Dict, List, Mapping

from tango.common.exceptions import ConfigurationError

from .tables import MACRO_AVERAGE, MetricsTable

#: OLMES's name of each accuracy, and ours.
OLMES_NAMES = {
    "acc_raw": "acc", "acc_per_char": "acc_norm", "acc_per_token": "acc_per_token", "acc_uncond": "acc_uncond",
}


def olmes_metrics(records: List[Mapping[str, Any]], accuracies: Mapping[str, Any]) -> Dict[str, Any]:
    """OLMES's accuracies of ``records`` (taken from ``accuracies``, ours of them), their
    ``primary_metric`` and its value, ``primary_score``; nothing for records that name no
    primary metric."""
    primary = records[0].get("primary_metric") if records else None
    if primary is None:
        return {}
    named = {olmes: accuracies[ours] for olmes, ours in OLMES_NAMES.items() if ours in accuracies}
    if primary not in named:
        raise ValueError(f"primary metric {primary!r} cannot be computed from these records (have: "
                         f"{', '.join(named)}): acc_uncond needs unconditioned: true in catwalk::predict")
    return {**named, "primary_metric": primary, "primary_score": named[primary]}


#: The formulations a core task is run in, as OLMES's aliases name them.
FORMULATIONS = ("rc", "mc")


def check_olmes_rows(names: List[str]) -> None:
    """Refuses, at graph build, rows not named ``model/task/rc`` or ``model/task/mc``, and a task
    without both."""
    seen: Dict[tuple, set] = {}
    for name in names:
        parts = name.split("/")
        if len(parts) != 3 or parts[2] not in FORMULATIONS:
            raise ConfigurationError(f"olmes table: row {name!r} is not model/task/rc or model/task/mc")
        seen.setdefault(tuple(parts[:2]), set()).add(parts[2])
    lacking = [f"{model}/{task}" for (model, task), formulations in seen.items() if len(formulations) < 2]
    if lacking:
        raise ConfigurationError(f"olmes table: {', '.join(lacking)} need both an rc and an mc row")


def olmes_table(results: Mapping[str, Mapping[str, Any]]) -> MetricsTable:
    """OLMES's core-suite table from each variant's metrics (rows ``model/task/rc`` and
    ``model/task/mc``): per model and task, each variant's primary score, the better of the two
    (``best``, what OLMES reports for the task), and per model their macro averages."""
    check_olmes_rows(list(results))
    scores: Dict[str, Dict[str, Dict[str, float]]] = {}
    for name, metrics in results.items():
        model, task, formulation = name.split("/")
        scores.setdefault(model, {}).setdefault(task, {})[formulation] = metrics["primary_score"]
    rows: List[Dict[str, Any]] = []
    for model, tasks in scores.items():
        model_rows = [{"model": model, "task": task, **both, "best": max(both.values())}
                      for task, both in tasks.items()]
        average = {column: sum(row[column] for row in model_rows) / len(model_rows) for column in ("rc", "mc", "best")}
        rows += model_rows + [{"model": model, "task": MACRO_AVERAGE, **average}]
    return MetricsTable(["model", "task", "rc", "mc", "best"], rows,
                        caption="rc, mc: each variant's primary metric (OLMES v0.1); best: the better of the two")
