"""What global rank 0 reports about a training run to W&B and TensorBoard (``wandb_project``,
``tensorboard_dir`` on ``catwalk::finetune``), driven by the loop:

- ``start(step)`` once the checkpoint (if any) is loaded: the run opens (a resumed run
  continues its W&B run; see :mod:`.settings`), its config holds every
  setting in the step's key, the step's id and the world size;
- ``log_training(step, loss, lr, grad_norm)`` at every entry of ``history["loss"]``, with the
  same numbers: ``train/loss`` (over the whole global batch), ``train/lr`` (this step's),
  ``train/grad_norm`` (before clipping), ``train/examples_per_s`` and ``train/tokens_per_s``
  (since the last report, counting every worker's share; tokens are each (context, choice)
  pair's, as tokenized), ``train/peak_memory_gib`` (rank 0's: CUDA's peak allocation, or the
  process's peak resident memory on CPU);
- ``log_checkpoint(progress)`` after each checkpoint: the validation's ``val/acc``,
  ``val/loss`` (every number of the validation record), each eval task's ``eval/TASK/METRIC``
  (``eval_tasks``), and in the summary the best validation's numbers and its step.

The step axis is the count of optimizer steps done, as in ``history``. Other ranks, and runs
without trackers, report nothing. A tracker's failure never fails training
(:mod:`catwalk_steps.tracking.wandb_run`).

The loop hands over its job (``training.loop.TrainingJob``: its ``plan``, ``train`` examples
and ``tracking``) and its checkpoints' ``Progress`` as they are; they are not imported here, so
tracking stays below training (see ``catwalk_steps/__init__.py``).
"""

import logging
import math
import resource
import time
from typing import Any, Dict, List, Optional

import torch

from .settings import Tracking

#: Where a validation record holds the eval tasks' numbers, by task then metric (the loop's
#: ``eval_tasks``: :mod:`catwalk_steps.training.eval_tasks`).
EVAL = "eval"

GIB = 2 ** 30
logger = logging.getLogger(__name__)


class TrainingTracker:
    """Rank 0's trackers of one training job (none on other ranks); a context manager that
    finishes them, marking the run failed when training raised."""

    def __init__(self, tracking: Optional[Tracking], rank: int, job: Any, world_size: int, device: torch.device) -> None:
        self.tracking = tracking if rank == 0 else None
        self.job = job
        self.world_size = world_size
        self.device = device
        self.trackers: List[Any] = []
        self.last_step = 0
        self.since = time.perf_counter()

    @property
    def measures_gradients(self) -> bool:
        """Whether the loop should measure the gradient norm (the same on every rank)."""
        return self.job.tracking is not None

    def __enter__(self) -> "TrainingTracker":
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        for tracker in self.trackers:
            tracker.finish(failed=error_type is not None)

    def start(self, step: int) -> None:
        if self.tracking is None:
            return
        if self.tracking.wandb is not None:
            from .wandb_run import WandbRun

            identity = self.tracking.identity
            identity.config = {**identity.config, "world_size": self.world_size, "device": self.device.type}
            run = WandbRun(self.tracking.wandb, identity)
            run.open()
            self.trackers.append(run)
        if self.tracking.tensorboard_dir is not None:
            from .tensorboard import TensorBoardRun

            try:
                self.trackers.append(TensorBoardRun(self.tracking.tensorboard_dir, resumed_at=step))
            except OSError as e:  # an unwritable folder: training goes on without it
                logger.warning("TensorBoard: cannot write to %s (%s); not logging to TensorBoard",
                               self.tracking.tensorboard_dir, e)
        self.last_step, self.since = step, time.perf_counter()

    def _log(self, values: Dict[str, Any], step: int) -> None:
        for tracker in self.trackers:
            tracker.log(values, step)

    def _tokens(self, steps: range) -> int:
        examples = (self.job.train[i] for step in steps for i in self.job.plan.step_examples(step))
        return sum(map(self.job.objective.example_tokens, examples))  # the kind's count

    def _peak_memory_gib(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / GIB
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # KiB on Linux

    def log_training(self, step: int, loss: float, lr: float, grad_norm: Optional[torch.Tensor]) -> None:
        if not self.trackers:
            return
        seconds = max(time.perf_counter() - self.since, 1e-9)
        steps = range(self.last_step, step)
        values = {
            "train/loss": loss, "train/lr": lr,
            "train/examples_per_s": len(steps) * self.job.plan.batch_size / seconds,
            "train/tokens_per_s": self._tokens(steps) / seconds,
            "train/peak_memory_gib": self._peak_memory_gib(),
            "train/epoch": step / self.job.plan.steps_per_epoch,
        }
        if grad_norm is not None and math.isfinite(norm := grad_norm.item()):
            values["train/grad_norm"] = norm
        self._log(values, step)
        self.last_step, self.since = step, time.perf_counter()

    def log_checkpoint(self, progress: Any) -> None:
        """After the checkpoint of ``progress.step``: its validation, if any, and the best so far.
        The time validating and checkpointing is left out of the next throughput."""
        if not self.trackers:
            return
        validation = progress.validations[-1] if progress.validations else None
        if validation is not None and validation["step"] == progress.step:
            self._log({**{f"val/{name.removeprefix('val_')}": value for name, value in validation.items()
                           if name not in ("step", "epoch", EVAL)}, **_eval_scalars(validation, "eval/")},
                      progress.step)
            best = progress.best
            summary = {**{f"best/{name.removeprefix('val_')}": value for name, value in best.items() if name != EVAL},
                       **_eval_scalars(best, "best/eval/")}
            for tracker in self.trackers:
                tracker.summarize(summary)
        self.last_step, self.since = progress.step, time.perf_counter()


def _eval_scalars(validation: Dict[str, Any], prefix: str) -> Dict[str, float]:
    """Each eval task's numbers of a validation record, as ``<prefix>TASK/METRIC``."""
    return {f"{prefix}{task}/{metric}": value
            for task, metrics in validation.get(EVAL, {}).items() for metric, value in metrics.items()}
