"""Tango's ``TrainCallback`` contract, against our loop, and early stopping.

Callbacks are observers: they are not in the cache key, so they must not change training. They
are called as Tango's ``torch::train`` calls them:

- ``pre_train_loop()`` before the first step (also after a resume), ``pre_epoch(step, epoch)`` /
  ``post_epoch(step, epoch)`` around each epoch, ``post_train_loop(step, epoch)`` last;
- per *optimizer step*: ``pre_batch(step, epoch, batch)`` with the list of this worker's
  micro-batches (collated, on the CPU), then ``post_batch(step, epoch, batch_loss, outputs)``
  after the backward passes and before the optimizer step, with this worker's loss of the step
  (the mean over its micro-batches) and the list of its micro-batches' detached outputs;
  ``log_batch(step, epoch, batch_loss, outputs)`` every ``log_every`` steps (and at every
  validation) after the optimizer step, with the loss averaged over all workers;
- in validation, ``pre_val_batch(step, val_step, epoch, val_batch)`` and
  ``post_val_batch(step, val_step, epoch, outputs)`` per validation batch of this worker's share,
  then ``post_val_loop(step, epoch, val_metric, best_val_metric)`` with the validation number
  that chooses the best weights (``val_acc`` unless the step's ``val_metric`` says otherwise).

``step`` is the 0-based index of the optimizer step, as in Tango. Every callback's
``state_dict()`` (rank 0's, JSON) is saved with each checkpoint and given back to
``load_state_dict`` when a run resumes.

Tango's ``StopEarly`` (raised by ``torch::stop_early``) would change the model while staying
out of the key: it fails the step with a :class:`CallbackStoppedTraining` that points to the
step's ``patience`` setting.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
from tango.common import DatasetDict
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.integrations.torch import StopEarly, TrainCallback, TrainConfig

from .checkpoints import ranking


class CallbackStoppedTraining(ConfigurationError):
    """A callback raised Tango's ``StopEarly``."""


def stop_early_message(name: str) -> str:
    return (
        f"{name} stops training early, but callbacks are not part of catwalk::finetune's cache key (they "
        "may only observe training): set `patience: N` on the step instead (stop after N validations "
        "without an improvement of the validation accuracy; in the key), and remove the callback"
    )


def check_callbacks(callbacks: Optional[List[Lazy]]) -> None:
    """Fails when the step graph is built for Tango's own early-stopping callback."""
    from tango.integrations.torch.train_callback import StopEarlyCallback

    from .optimizers import lazy_class

    for callback in callbacks or []:
        cls = lazy_class(callback, TrainCallback)
        if cls is not None and issubclass(cls, StopEarlyCallback):
            raise CallbackStoppedTraining(stop_early_message("torch::stop_early"))


@dataclass
class EngineView:
    """What Tango's callbacks read from a training engine."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    lr_scheduler: Any


class Callbacks:
    """The constructed callbacks of one worker; ``callbacks.pre_batch(...)`` calls each in turn."""

    def __init__(self, callbacks: List[TrainCallback]) -> None:
        self.callbacks = callbacks

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def _call(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            try:
                getattr(callback, hook)(*args)
            except StopEarly as e:
                raise CallbackStoppedTraining(stop_early_message(type(callback).__name__)) from e

    # Tango's hooks, each named once: a misspelled hook in the loop is an AttributeError.
    def pre_train_loop(self) -> None:
        self._call("pre_train_loop")

    def post_train_loop(self, step: int, epoch: int) -> None:
        self._call("post_train_loop", step, epoch)

    def pre_epoch(self, step: int, epoch: int) -> None:
        self._call("pre_epoch", step, epoch)

    def post_epoch(self, step: int, epoch: int) -> None:
        self._call("post_epoch", step, epoch)

    def pre_batch(self, step: int, epoch: int, batch: Any) -> None:
        self._call("pre_batch", step, epoch, batch)

    def post_batch(self, step: int, epoch: int, batch_loss: float, outputs: Any) -> None:
        self._call("post_batch", step, epoch, batch_loss, outputs)

    def log_batch(self, step: int, epoch: int, batch_loss: float, outputs: Any) -> None:
        self._call("log_batch", step, epoch, batch_loss, outputs)

    def pre_val_batch(self, step: int, val_step: int, epoch: int, val_batch: Any) -> None:
        self._call("pre_val_batch", step, val_step, epoch, val_batch)

    def post_val_batch(self, step: int, val_step: int, epoch: int, val_batch_outputs: Any) -> None:
        self._call("post_val_batch", step, val_step, epoch, val_batch_outputs)

    def post_val_loop(self, step: int, epoch: int, val_metric: float, best_val_metric: float) -> None:
        self._call("post_val_loop", step, epoch, val_metric, best_val_metric)

    def state_dicts(self) -> List[Dict[str, Any]]:
        return [callback.state_dict() for callback in self.callbacks]

    def load_state_dicts(self, states: List[Dict[str, Any]]) -> None:
        for callback, state in zip(self.callbacks, states):
            callback.load_state_dict(state)


def build_callbacks(job, rank: int, world_size: int, device: torch.device, engine: EngineView) -> Callbacks:
    if not job.callbacks:
        return Callbacks([])
    config = TrainConfig(
        step_id=job.step_id,
        work_dir=job.work_dir,
        step_name=job.step_name,
        worker_id=rank,
        validation_split="validation" if job.validation is not None else None,
        seed=job.plan.seed,
        train_steps=job.train_steps,
        grad_accum=job.plan.micro_batches_per_step // world_size,
        log_every=job.log_every,
        checkpoint_every=job.validate_every,
        validate_every=job.validate_every,
        is_distributed=world_size > 1,
        devices=list(range(world_size)) if device.type == "cuda" else [-1] * world_size,
        val_metric_name="acc",
        minimize_val_metric=False,
        world_size=world_size,
    )
    datasets = DatasetDict(splits={"train": job.train, **({"validation": job.validation} if job.validation else {})})
    return Callbacks([
        callback.construct(
            workspace=job.workspace, train_config=config, training_engine=engine, dataset_dict=datasets,
            train_dataloader=None, validation_dataloader=None,
        )
        for callback in job.callbacks
    ])


def should_stop(validations: List[Dict[str, Any]], patience: Optional[int], selected: str = "val_acc") -> bool:
    """Whether the last ``patience`` validations all failed to improve on the best number
    ``selected`` before them (the validation accuracy, or the lowest loss; see
    :func:`.checkpoints.ranking`): the first validation to reach the best is the last
    improvement; an equal number is no improvement."""
    if patience is None or not validations:
        return False
    scores = [ranking(v, selected)[0] for v in validations]
    last_improvement = scores.index(max(scores))
    return len(scores) - 1 - last_improvement >= patience
