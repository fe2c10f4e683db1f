"""Which request kind a ``catwalk::finetune`` step trains, and its ``val_metric``, checked when the
step graph is built. What training on a kind is (its examples, loss and validation) is the
kind's own :class:`~catwalk_steps.kinds.TrainingObjective`; this module holds the step's rules
around it: one kind per step, and a ``val_metric`` that kind's validation measures."""

from typing import Any, Dict, Sequence

from tango import Step
from tango.common.exceptions import ConfigurationError

from ..kinds import KINDS, MultipleChoice, RequestKind, TrainingObjective
from .eval_tasks import is_eval_metric


def trained_kind(tasks: Sequence[Any]) -> RequestKind:
    """The request kind of all of ``tasks`` (multiple choice where there are none yet): a step
    trains on tasks of one kind, never on a mix (their losses are not on one scale)."""
    kinds = {getattr(task, "REQUEST_TYPE", None): task for task in tasks}
    unknown = [name for name in kinds if name not in KINDS or KINDS[name].training is None]
    if unknown:
        trainable = " or ".join(kind.training.tasks_called for kind in KINDS.values() if kind.training)
        names = ", ".join(f"{type(kinds[name]).__name__} ({name})" for name in unknown)
        raise ConfigurationError(f"catwalk::finetune trains on {trainable} tasks; it cannot train on {names}")
    if len(kinds) > 1:
        called = " or all ".join(objective(KINDS[name]).tasks_called for name in kinds)
        listed = "; ".join(f"{name}: {type(task).__name__}" for name, task in kinds.items())
        raise ConfigurationError(
            f"catwalk::finetune's tasks must be all {called}, not a mix ({listed}): their losses are not on one "
            "scale. Fine-tune in two steps, one per kind"
        )
    return KINDS[next(iter(kinds), MultipleChoice.name)]


def objective(kind: RequestKind) -> TrainingObjective:
    """``kind``'s training objective (:func:`trained_kind` only returns kinds that have one)."""
    assert kind.training is not None, kind.name
    return kind.training


def check_val_metric(kwargs: Dict[str, Any]) -> None:
    """Checks ``val_metric`` against the tasks' kind, the metrics they report and the strategy,
    when the step graph is built; one naming its kind's default becomes ``None``, so that it keeps
    the default's key."""
    # A task that another step makes is known when this step runs: run() checks it then.
    tasks = [task for task in kwargs.get("tasks") or [] if not isinstance(task, Step)]
    training = objective(trained_kind(tasks))
    val_metric = training.val_metric(kwargs.get("val_metric"))
    if val_metric is None or not tasks or is_eval_metric(val_metric):  # (an eval task's: .eval_tasks checks it)
        return
    training.check_val_metric(val_metric, tasks)
    if kwargs.get("validation_split", "validation") is None:
        raise ConfigurationError("val_metric needs a validation_split to measure")
    workers = kwargs.get("device_count", 1) * kwargs.get("nodes", 1)
    if training.generates(val_metric) and kwargs.get("strategy", "ddp") == "fsdp" and workers > 1:
        raise ConfigurationError(
            f"val_metric: {val_metric} generates on each worker's share of the validation split, which a model "
            "sharded with strategy fsdp cannot do (its workers must run forward passes in step): "
            "validate by loss (the default) under fsdp, or train with ddp"
        )
    if val_metric == training.val_metrics[0]:
        kwargs["val_metric"] = None
