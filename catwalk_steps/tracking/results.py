"""A results table and its charts in W&B (``wandb_project`` on ``catwalk::export_predictions``):
the table as a ``wandb.Table`` (standard errors in columns of their own, as in the CSV), one
summary value per cell (``<row's names>/<metric>``, e.g. ``piqa/fine-tuned/acc``, so runs can be
compared and charted by any cell), and each chart as an image."""

from pathlib import Path
from typing import Dict, List, Optional

from ..reports.tables import MetricsTable
from .settings import RunIdentity, WandbSettings
from .wandb_run import WandbRun


def table_cells(table: MetricsTable) -> Dict[str, float]:
    """Every number of ``table`` by ``<its row's names>/<column>``."""
    names = table.text_columns()
    return {
        "/".join([*(str(row[c]) for c in names if row.get(c) is not None), column]): row[column]
        for row in table.rows for column in table.columns
        if column not in names and isinstance(row.get(column), (int, float))
    }


def publish_results(settings: WandbSettings, identity: RunIdentity, table: Optional[MetricsTable], charts: List[Path]) -> None:
    """One W&B run (the same one each time the export runs) with ``table`` and ``charts``."""
    import wandb

    run = WandbRun(settings, identity)
    run.open()
    logged: Dict[str, object] = {f"charts/{path.stem}": wandb.Image(str(path)) for path in charts}
    if table is not None:
        logged["results"] = wandb.Table(columns=table.columns, data=[[row.get(c) for c in table.columns] for row in table.rows])
        run.summarize(table_cells(table))
    if logged:
        run.log(logged)
    run.finish()
