"""How training went, as a picture: the training loss and the validation accuracy (a generative
fine-tune's exact match or loss) against the optimizer step, one line per fine-tuned model (of a sweep), from what FinetuneStep records in its
result's ``training_metrics["history"]``."""

from pathlib import Path
from typing import Any, Dict, List, Mapping

from ..storage.atomic import publish_file

#: What a run's validation panel shows: the first of these its validations hold.
VALIDATION_NUMBERS = {"val_acc": "accuracy", "val_exact_match": "exact match", "val_loss": "loss"}


def has_history(training_metrics: Mapping[str, Any]) -> bool:
    history = training_metrics.get("history") or {}
    return bool(history.get("loss") or history.get("validations"))


def training_chart(runs: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    """Writes a PNG of two panels, the training loss (every ``log_every`` steps) and the
    validation accuracy (at every validation), against the step, one line per run of ``runs``
    (run name -> ``training_metrics``); a run's best validation is marked, and where it stopped
    early. Runs without a history (trained before it was recorded) are left out."""
    from matplotlib.figure import Figure  # only here (see charts.py)

    fig = Figure(figsize=(11.0, 4.5), layout="constrained")
    loss_ax, acc_ax = fig.subplots(1, 2)
    shown = []
    for n, (name, metrics) in enumerate(runs.items()):
        if not has_history(metrics):
            continue
        color = f"C{n % 10}"
        history = metrics["history"]
        losses: List[List[float]] = history.get("loss") or []
        if losses:
            loss_ax.plot([s for s, _ in losses], [v for _, v in losses], color=color, label=name, linewidth=1.2)
        validations: List[Dict[str, Any]] = history.get("validations") or []
        if validations:
            key = next(key for key in VALIDATION_NUMBERS if key in validations[0])
            if VALIDATION_NUMBERS[key] not in shown:
                shown.append(VALIDATION_NUMBERS[key])
            acc_ax.plot([v["step"] for v in validations], [v[key] for v in validations], color=color,
                        marker="o", markersize=3, label=name, linewidth=1.2)
            if key in metrics:
                acc_ax.plot([metrics["step"]], [metrics[key]], color=color, marker="*", markersize=11)
        if metrics.get("stopped_at") is not None:
            for ax in (loss_ax, acc_ax):
                ax.axvline(metrics["stopped_at"], color=color, linestyle=":", linewidth=1)
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("training loss")
    loss_ax.set_title("Training loss")
    acc_ax.set_xlabel("step")
    acc_ax.set_ylabel("validation " + " / ".join(shown or ["accuracy"]))
    acc_ax.set_title(f"Validation {' / '.join(shown or ['accuracy'])} (* best; dotted: stopped early)")
    handles, labels = acc_ax.get_legend_handles_labels()
    if not handles:
        handles, labels = loss_ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="outside right upper")
    publish_file(path, lambda temp: fig.savefig(temp, format="png", dpi=120))
