"""One node's part of a ``catwalk::finetune`` run, from its :class:`~.settings.FinetuneSettings`:
node 0 (the step's ``run()``) trains and returns the result; every other node (the step's
``join()``) runs its workers with node 0's (:mod:`..distributed.nodes`). Either checks the devices,
reads and tokenises the data (:mod:`.preparation`) and checks the disk (:mod:`.preflight`) before
any model is loaded, then starts the workers of :mod:`.loop`."""

import logging
from pathlib import Path

from tango import Step
from tango.workspace import Workspace

from ..distributed.devices import worker_devices
from ..distributed.launch import launch
from ..distributed.nodes import StartWorkers, run_as_joining_node, run_as_node_zero
from ..models.finetuned import FinetunedModel
from ..tracking.settings import TRACKING_ARGUMENTS, tracking_of
from .result import RESULT, finished_model
from .settings import FinetuneSettings

logger = logging.getLogger(__name__)


def fine_tune(settings: FinetuneSettings, step: Step, workspace: Workspace, work_dir: Path) -> FinetunedModel:
    """Node 0's run: the result of training, or of an earlier run of ``step`` in ``work_dir``
    that was killed after training ended, before its result was cached."""
    spec = settings.model_spec()
    done = finished_model(work_dir, spec, settings.adapter)
    if done is not None:
        logger.info("Training had ended; its result is taken from %s", work_dir / RESULT)
        return done
    start = _start_workers(settings, step, workspace, work_dir)
    run_as_node_zero(start, work_dir, settings.nodes, settings.distributed_port)
    result = finished_model(work_dir, spec, settings.adapter)
    assert result is not None, "the workers ended without writing the result"
    return result


def join_fine_tuning(settings: FinetuneSettings, step: Step, workspace: Workspace, timeout: float) -> None:
    """Another node's run: waits up to ``timeout`` seconds for node 0's rendezvous in ``step``'s
    work dir, then trains with it until the workers end."""
    work_dir = workspace.work_dir(step)
    run_as_joining_node(_start_workers(settings, step, workspace, work_dir), work_dir, timeout)


def _start_workers(settings: FinetuneSettings, step: Step, workspace: Workspace, work_dir: Path) -> StartWorkers:
    """What starts this node's workers on the job ``settings`` describe. The devices are checked,
    the data read and the disk's room checked before any model is loaded."""
    from .loop import train_worker  # transformers, peft: only when training
    from .preflight import check_disk_space
    from .preparation import training_job

    devices = worker_devices(settings.device, settings.device_count)
    tracking = tracking_of(step, work_dir, **{name: getattr(settings, name) for name in TRACKING_ARGUMENTS})
    job = training_job(settings, work_dir=work_dir, workspace=workspace, step_id=step.unique_id,
                       step_name=step.name, tracking=tracking)
    workers = settings.workers
    logger.info(
        "Training for %d steps of %d instances (%d micro-batches of %d) on %d worker%s (%s, %s)",
        job.train_steps, job.plan.batch_size, job.plan.micro_batches_per_step, job.plan.micro_batch_size,
        workers, "s" if workers > 1 else "", devices[0].type, settings.strategy,
    )
    check_disk_space(job, workers)
    return lambda nodes: launch(train_worker, devices, job, nodes=nodes, max_restarts=settings.max_restarts)
