"""How training went, as a picture: the training loss and the validation accuracy (a generative
fine-tune's exact match or loss) against the optimizer step, one line per fine-tuned model (of a sweep), from what FinetuneStep records in its
result's ``training_metrics["history"]``; and, for runs with ``eval_tasks``, each eval task's
headline number (:func:`eval_curves`)."""

from itertools import cycle
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

from ..storage.atomic import publish_file

#: What a run's validation panel shows: the first of these its validations hold.
VALIDATION_NUMBERS = {"val_acc": "accuracy", "val_exact_match": "exact match", "val_loss": "loss"}


def has_history(training_metrics: Mapping[str, Any]) -> bool:
    history = training_metrics.get("history") or {}
    return bool(history.get("loss") or history.get("validations"))


def headline(metrics: Mapping[str, float]) -> str:
    """The number of an eval task's metrics that its curve draws: its first that is neither a
    standard error, a count nor a perplexity (``acc``, ``exact_match``, ``bits_per_byte``), on a
    scale the other curves share."""
    drawn = (name for name in metrics
             if not (name.endswith(("_stderr", "perplexity")) or name in ("count", "truncated")))
    return next(drawn, next(iter(metrics)))


def eval_curves(history: Mapping[str, Any]) -> Dict[str, Tuple[List[int], List[float]]]:
    """``{"TASK METRIC": (steps, values)}``: each eval task's :func:`headline` number at every
    validation of ``history`` (``catwalk::finetune``'s ``eval_tasks``)."""
    curves: Dict[str, Tuple[List[int], List[float]]] = {}
    for validation in history.get("validations") or []:
        for task, metrics in validation.get("eval", {}).items():
            steps, values = curves.setdefault(f"{task} {headline(metrics)}", ([], []))
            steps.append(validation["step"])
            values.append(metrics[headline(metrics)])
    return curves


def training_chart(runs: Mapping[str, Mapping[str, Any]], path: Path) -> None:
    """Writes a PNG of two panels, the training loss (every ``log_every`` steps) and the
    validation accuracy (at every validation), against the step, one line per run of ``runs``
    (run name -> ``training_metrics``); a run's best validation is marked, and where it stopped
    early; and a third of the eval tasks' curves (:func:`eval_curves`), where a run has them.
    Runs without a history (trained before it was recorded) are left out."""
    from matplotlib.figure import Figure  # only here (see charts.py)

    evaluated = {name: eval_curves(metrics["history"]) for name, metrics in runs.items() if has_history(metrics)}
    panels = 3 if any(evaluated.values()) else 2
    fig = Figure(figsize=(5.5 * panels, 4.5), layout="constrained")
    loss_ax, acc_ax, *eval_ax = fig.subplots(1, panels)
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
        for style, (label, (steps, values)) in zip(cycle(("-", "--", "-.", ":")), evaluated[name].items()):
            eval_ax[0].plot(steps, values, color=color, linestyle=style, marker="o", markersize=3,
                            label=f"{name}: {label}", linewidth=1.2)
        if metrics.get("stopped_at") is not None:
            for ax in (loss_ax, acc_ax, *eval_ax):
                ax.axvline(metrics["stopped_at"], color=color, linestyle=":", linewidth=1)
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("training loss")
    loss_ax.set_title("Training loss")
    acc_ax.set_xlabel("step")
    acc_ax.set_ylabel("validation " + " / ".join(shown or ["accuracy"]))
    acc_ax.set_title(f"Validation {' / '.join(shown or ['accuracy'])} (* best; dotted: stopped early)")
    if eval_ax:
        eval_ax[0].set_xlabel("step")
        eval_ax[0].set_title("Eval tasks")
        eval_ax[0].legend(fontsize=7)
    handles, labels = acc_ax.get_legend_handles_labels()
    if not handles:
        handles, labels = loss_ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="outside right upper")
    publish_file(path, lambda temp: fig.savefig(temp, format="png", dpi=120))
