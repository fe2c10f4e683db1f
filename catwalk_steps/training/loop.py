"""The training loop: one function that every worker runs, readable in one sitting.

What makes its result independent of how it was computed:
- each optimizer step is one whole global batch of the :class:`~.batches.BatchPlan`, its
  micro-batches shared out over the workers, their losses averaged over the whole batch (over
  its instances for multiple choice, over its answer tokens for generative tasks: the kind's
  :class:`~catwalk_steps.kinds.TrainingObjective` says how);
- before each micro-batch's forward pass the RNG is seeded from (seed, step, micro-batch), so the
  dropout masks do not depend on the rank, the device count or on interruptions;
- validation is exact (per-instance sums over each worker's shard, summed over workers) and runs
  at every checkpoint, so the best validation's weights (by ``job.selected``) are always saved;
- checkpoints hold the global state, sharded by name (see :mod:`.checkpoints`), so a run resumes
  on any number of devices, under either strategy;
- the result is the best validation's weights, written without gathering them (:mod:`.result`);
- the optimizer and schedule are built per worker (:mod:`.optimizers`); callbacks observe only
  (:mod:`.callbacks`), and so do the trackers (W&B, TensorBoard: :mod:`catwalk_steps.tracking.training`); early
  stopping (``patience``) is recorded in the checkpoint, so a stopped run resumes as stopped.
"""

import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
from tango.common import Tqdm
from tango.common.lazy import Lazy
from tango.integrations.torch import TrainCallback
from tango.workspace import Workspace

from ..distributed.heap import release_freed_heap_while_training
from ..kinds import TrainingObjective, kind_named
from ..kinds.objective import GENERATED
from ..models.adapters import Adapter
from ..models.loading import ModelSpec
from ..models.rank_classification import RankClassificationModel
from ..models.transfer import on_device
from ..tracking.settings import Tracking
from ..tracking.training import TrainingTracker
from .batches import BatchPlan
from .callbacks import Callbacks, EngineView, build_callbacks, should_stop
from .checkpoints import CHECKPOINTS, CheckpointStore, Progress
from .downstream import DownstreamTask, downstream_scores
from .eval_tasks import EVAL, measured
from .gradients import clip_gradients
from .optimizers import build_optimizer, build_schedule
from .result import write_result
from .seeds import derive_seed
from .strategies import gradient_sync, placed_model, whole_on_every_worker
from .throughput import Throughput, peak_flops
from .trained_kind import objective

Example = Dict[str, Any]
logger = logging.getLogger(__name__)


@dataclass
class TrainingJob:
    """Everything a worker needs to train; sent once to each DDP worker."""

    spec: ModelSpec
    train: List[Example]
    validation: Optional[List[Example]]
    plan: BatchPlan
    train_steps: int
    validate_every: int
    learning_rate: float
    weight_decay: float
    warmup_steps: int
    max_grad_norm: Optional[float]
    pad_token_id: int
    max_length: int
    work_dir: Path
    log_every: int
    adapter: Optional[Adapter] = None
    strategy: str = "ddp"
    precision: str = "32"
    gradient_checkpointing: bool = False
    shared_context: bool = True
    # For Tango train callbacks, which observe only.
    callbacks: Optional[List[Lazy[TrainCallback]]] = None
    workspace: Optional[Workspace] = None
    step_id: str = ""
    step_name: Optional[str] = None
    # Lazy[Optimizer] / Lazy[LRScheduler]; None: AdamW(learning_rate, weight_decay), linear warm-up.
    optimizer: Optional[Lazy] = None
    lr_scheduler: Optional[Lazy] = None
    decay_biases_and_norms: bool = False
    patience: Optional[int] = None
    tracking: Optional[Tracking] = None  # W&B / TensorBoard, reported by rank 0 (see catwalk_steps.tracking.training)
    #: The request kind trained on (its name: the kind, :attr:`objective`, is found in each worker).
    kind: str = "multiple_choice"
    #: The validation number that chooses the best weights (``val_acc``, ``val_loss``, ``val_<metric>``).
    selected: str = "val_acc"
    #: The tasks, to score validation generations by their rules, and the name of the selected
    #: metric in each one's scores (a generated metric only).
    tasks: Optional[List[Any]] = None
    task_metrics: Optional[List[str]] = None
    #: ``eval_tasks``' requests, scored at every validation (:mod:`.downstream`).
    eval_tasks: Optional[List[DownstreamTask]] = None

    @property
    def objective(self) -> TrainingObjective:
        """What training on :attr:`kind` is: its model, collator, loss divisor and validation."""
        return objective(kind_named(self.kind))

    def build_model(self, lm=None) -> RankClassificationModel:
        """The model to train (``lm``: one whose weights are still on the meta device)."""
        return self.objective.model(self.spec, self.adapter, self.gradient_checkpointing, self.shared_context, lm=lm)

    def collator(self, model: RankClassificationModel):
        """What turns a list of examples into the model's batch."""
        return self.objective.collator(model, self.pad_token_id, self.max_length)

    def loss_divisor(self, step: int, world_size: int) -> float:
        """What a micro-batch's loss is divided by, so that with DDP's average over the workers
        the step's gradient is the global batch's mean (:meth:`.TrainingObjective.loss_divisor`)."""
        step_examples = [self.train[i] for i in self.plan.step_examples(step)]
        return self.objective.loss_divisor(step_examples, self.plan.micro_batches_per_step // world_size, world_size)

    @cached_property
    def conventions(self):
        """The tokenizer's conventions, loaded once per worker (by validation's generations and
        the eval tasks)."""
        return self.spec.conventions()

    @property
    def checkpoints(self) -> CheckpointStore:
        return CheckpointStore(self.work_dir / CHECKPOINTS)

    def is_checkpoint_step(self, steps_done: int) -> bool:
        return steps_done % self.validate_every == 0 or steps_done == self.train_steps


def _sum_over_workers(values: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(values)
    return values


def _sums_over_workers(sums: Dict[str, torch.Tensor]) -> Dict[str, float]:
    """Named sums, each summed over the workers (in one all-reduce, in the names' order)."""
    names = sorted(sums)
    return dict(zip(names, _sum_over_workers(torch.stack([sums[name] for name in names])).tolist()))


@torch.no_grad()
def validate(
    model: RankClassificationModel, job: TrainingJob, collate, rank: int, world_size: int, device: torch.device,
    callbacks: Optional[Callbacks] = None, step: int = 0, epoch: int = 0,
) -> Dict[str, float]:
    """The kind's validation numbers over the whole validation split (worker ``rank`` scores every
    ``world_size``-th instance; the sums, not per-worker means, are combined: see
    :meth:`.TrainingObjective.validation_sums`), and the eval tasks' under :data:`.eval_tasks.EVAL`
    (:mod:`.downstream`). In full precision whatever the training precision, as PredictStep
    scores by default: the two agree."""
    assert job.validation is not None
    model.eval()
    training = job.objective
    shard = job.validation[rank::world_size]
    sums: Dict[str, torch.Tensor] = {}
    # Every worker runs as many forward passes (FSDP gathers parameters in each); one whose
    # shard is shorter scores a stand-in batch whose sums count for nothing.
    longest_shard = -(-len(job.validation) // world_size)
    for val_step, start in enumerate(range(0, longest_shard, job.plan.micro_batch_size)):
        items = shard[start:start + job.plan.micro_batch_size]
        batch = collate(items or job.validation[:1])
        if items and callbacks:
            callbacks.pre_val_batch(step, val_step, epoch, batch)
        outputs = model(**on_device(batch, device))
        if items and callbacks:
            callbacks.post_val_batch(step, val_step, epoch, outputs)
        for name, value in training.validation_sums(outputs, job.selected).items():
            sums[name] = sums.get(name, 0) + value.double() * bool(items)
    if job.task_metrics:  # greedy generations, scored by each task's rule
        sums[GENERATED] = torch.tensor(
            training.generated_score(model.scoring_lm, job.conventions, job.tasks, job.task_metrics, shard,
                                     job.max_length, job.plan.micro_batch_size), dtype=torch.float64, device=device)
    scores = training.validation_scores(_sums_over_workers(sums), job.selected, len(job.validation))
    if job.eval_tasks:
        with whole_on_every_worker(model):  # (FSDP: each worker scores a share of its own)
            scores[EVAL] = downstream_scores(model.scoring_lm, job.eval_tasks, job.spec, job.conventions, rank,
                                             world_size)
    model.train()
    return scores


def train_worker(rank: int, world_size: int, device: torch.device, job: TrainingJob) -> None:
    with TrainingTracker(job.tracking, rank, job, world_size, device) as tracker:
        _train(rank, world_size, device, job, tracker)


def _train(rank: int, world_size: int, device: torch.device, job: TrainingJob, tracker: TrainingTracker) -> None:
    torch.manual_seed(derive_seed(job.plan.seed, "init"))  # for any freshly initialised weights
    model, trained = placed_model(job, world_size, device)
    model.train()  # from_pretrained gives eval mode
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(model, job.optimizer, job.learning_rate, job.weight_decay, job.decay_biases_and_norms)
    schedule = build_schedule(job.lr_scheduler, optimizer, job.train_steps, job.warmup_steps)
    release_freed_heap_while_training(trained, optimizer)  # a lower peak per worker, the same numbers
    latest = job.checkpoints.latest()
    if latest is None:
        progress, training_state = Progress(selected=job.selected), {"callbacks": [], "losses": []}
    else:  # every worker reads the shards it keeps, whoever wrote them
        state = job.checkpoints.load(latest, model, optimizer)
        progress, training_state = Progress(**state["progress"]), state["training_state"]
        schedule.load_state_dict(training_state["schedule"])
        if rank == 0:
            logger.info("Resuming from the checkpoint of step %d (%s)", progress.step, latest)
    collate = job.collator(model)
    callbacks = build_callbacks(job, rank, world_size, device, EngineView(trained, optimizer, schedule))
    callbacks.load_state_dicts(training_state["callbacks"])
    losses = training_state.get("losses", [])  # [step, loss] every log_every steps, for the curves
    stopped_at = training_state.get("stopped_at")  # a stopped run resumes as stopped
    end = job.train_steps if stopped_at is None else progress.step

    tracker.start(progress.step)
    callbacks.pre_train_loop()
    start, shown = progress.step, {}
    desc = f"Training (resumed from step {start})" if start else "Training"
    bar = Tqdm.tqdm(total=end, initial=start, desc=desc, disable=rank != 0)
    throughput = Throughput(sum(p.numel() for p in model.parameters()), peak_flops(device, job.precision))
    for step in range(start, end):
        throughput.begin()
        epoch = job.plan.epoch_of(step)
        if step == start or step % job.plan.steps_per_epoch == 0:
            if step != start:
                callbacks.post_epoch(step, epoch - 1)
            callbacks.pre_epoch(step, epoch)

        # One optimizer step: this worker's micro-batches of the step's global batch.
        micro_batches = job.plan.micro_batches(step, rank, world_size)
        batches = [collate([job.train[i] for i in examples]) for _, examples in micro_batches]
        throughput.count(sum(len(examples) for _, examples in micro_batches), batches)
        callbacks.pre_batch(step, epoch, batches)
        # In an epoch's last, partial batch of packs, a worker with fewer micro-batches than
        # another runs stand-ins whose loss counts for nothing (:meth:`.BatchPlan.stand_ins`).
        passes = [(index, batch, 1.0) for (index, _), batch in zip(micro_batches, batches)]
        passes += [(-1, collate(job.train[:1]), 0.0)] * job.plan.stand_ins(step, rank, world_size)
        batch_loss, outputs = torch.zeros((), device=device), []
        divisor = job.loss_divisor(step, world_size)
        for n, (index, batch, weight) in enumerate(passes):
            batch = on_device(batch, device)
            torch.manual_seed(derive_seed(job.plan.seed, "dropout", step, index))
            # Gradients are all-reduced once per step, with the last micro-batch's backward pass.
            last = n == len(passes) - 1
            with gradient_sync(trained, enabled=last), torch.autocast(
                device.type, torch.bfloat16, enabled=job.precision == "bf16-mixed"
            ):
                output = trained(**batch)
                loss = output["loss"] * weight / divisor
                loss.backward()
            batch_loss += loss.detach()
            if callbacks and weight:
                outputs.append({k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in output.items()})
        if callbacks:  # this worker's loss, before the optimizer step, as Tango's loop
            callbacks.post_batch(step, epoch, batch_loss.item(), outputs)
        grad_norm = clip_gradients(trainable, job.max_grad_norm, measure=tracker.measures_gradients)
        lr = optimizer.param_groups[0]["lr"]  # this step's, for the trackers
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        progress.step = step + 1
        bar.update(1)

        log = progress.step % job.log_every == 0 or job.is_checkpoint_step(progress.step)
        if log:  # the same on every worker: the sum over workers is a collective
            loss_value = _sum_over_workers(batch_loss).item() / world_size
            if progress.step % job.log_every == 0:
                losses.append([progress.step, loss_value])
                tracker.log_training(progress.step, loss_value, lr, grad_norm)
            callbacks.log_batch(step, epoch, loss_value, outputs)
            shown.update(loss=f"{loss_value:.4f}", **throughput.rates())  # examples/s, tokens/s, MFU
            bar.set_postfix(shown)
        throughput.end()  # validation and checkpoints are not timed

        if job.is_checkpoint_step(progress.step):
            if job.validation is not None:
                scores = validate(model, job, collate, rank, world_size, device, callbacks, step, epoch)
                record = {"step": progress.step, "epoch": epoch, **scores}
                progress.validations.append(record)
                best, selected = progress.best, job.selected
                number, best_number = measured(record, selected), measured(best, selected)
                callbacks.post_val_loop(step, epoch, number, best_number)
                shown.update({selected: f"{number:.4f}", f"best_{selected}": f"{best_number:.4f}"})
                bar.set_postfix(shown)
                if should_stop(progress.validations, job.patience, selected) and progress.step < job.train_steps:
                    stopped_at = progress.step
            training_state = {
                "schedule": schedule.state_dict(),
                "callbacks": callbacks.state_dicts(),
                "losses": losses,
                **({"stopped_at": stopped_at} if stopped_at is not None else {}),
            }
            job.checkpoints.save(model, optimizer, training_state, progress, rank, world_size)  # every rank
            tracker.log_checkpoint(progress)
            if stopped_at is not None:
                if rank == 0:
                    logger.info("Stopping early at step %d: %d validations without a better %s",
                                stopped_at, job.patience, job.selected)
                break
    bar.close()
    optimizer.state.clear()  # the optimizer state is in the checkpoints; the result needs the memory
    history = {"loss": losses, "validations": [{k: n for k, n in v.items() if k != "epoch"}
                                               for v in progress.validations]}
    write_result(model, job.checkpoints, progress, job.work_dir, rank,
                 {"history": history, "world_size": world_size,  # for people; never read back
                  **({"stopped_at": stopped_at} if stopped_at is not None else {})})
    last_step = max(progress.step, 1) - 1
    last_epoch = job.plan.epoch_of(last_step)
    callbacks.post_epoch(last_step, last_epoch)
    callbacks.post_train_loop(last_step, last_epoch)

