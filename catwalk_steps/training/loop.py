"""The training loop: one function that every worker runs, readable in one sitting.

What makes its result independent of how it was computed:
- each optimizer step is one whole global batch of the :class:`~.batches.BatchPlan`, its
  micro-batches shared out over the workers, their losses averaged over the whole batch;
- before each micro-batch's forward pass the RNG is seeded from (seed, step, micro-batch), so the
  dropout masks do not depend on the rank, the device count or on interruptions;
- validation is exact (per-instance sums over each worker's shard, summed over workers) and runs
  at every checkpoint, so the best validation's weights are always saved;
- checkpoints hold the global state, sharded by name (see :mod:`.checkpoints`), so a run resumes
  on any number of devices, under either strategy;
- the result is the best validation's weights, written without gathering them (:mod:`.result`).
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist
from tango.common import DatasetDict, Tqdm
from tango.common.lazy import Lazy
from tango.integrations.torch import TrainCallback, TrainConfig
from tango.workspace import Workspace
from transformers import get_linear_schedule_with_warmup

from ..models.adapters import Adapter
from ..models.loading import ModelSpec
from ..models.rank_classification import RankClassificationCollator, RankClassificationModel
from .batches import BatchPlan
from .checkpoints import CHECKPOINTS, CheckpointStore, Progress
from .result import write_result
from .seeds import derive_seed
from .strategies import distribute, gradient_sync, sharded_model

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

    @property
    def checkpoints(self) -> CheckpointStore:
        return CheckpointStore(self.work_dir / CHECKPOINTS)

    def is_checkpoint_step(self, steps_done: int) -> bool:
        return steps_done % self.validate_every == 0 or steps_done == self.train_steps


@dataclass
class EngineView:
    """What Tango's callbacks read from a training engine."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    lr_scheduler: Any


def _to(batch: Dict[str, torch.Tensor], device: torch.device) -> Dict[str, torch.Tensor]:
    return {name: tensor.to(device) for name, tensor in batch.items()}


def _sum_over_workers(values: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(values)
    return values


@torch.no_grad()
def validate(
    model: RankClassificationModel, job: TrainingJob, collate, rank: int, world_size: int, device: torch.device
) -> Dict[str, float]:
    """Exact accuracy and mean loss over the whole validation split (worker ``rank`` scores every
    ``world_size``-th instance; the sums, not per-worker means, are combined). In full precision
    whatever the training precision, as PredictStep scores by default: the two agree."""
    assert job.validation is not None
    model.eval()
    shard = job.validation[rank::world_size]
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # correct, loss, count
    # Every worker runs as many forward passes (FSDP gathers parameters in each); one whose
    # shard is shorter scores a stand-in batch and drops its numbers.
    longest_shard = -(-len(job.validation) // world_size)
    for start in range(0, longest_shard, job.plan.micro_batch_size):
        items = shard[start:start + job.plan.micro_batch_size]
        outputs = model(**_to(collate(items or job.validation[:1]), device))
        if items:
            sums += torch.stack([outputs["correct"].sum(), outputs["losses"].sum(), torch.tensor(len(items))]).to(sums)
    correct, loss, count = _sum_over_workers(sums).tolist()
    model.train()
    return {"val_acc": correct / count, "val_loss": loss / count}


def train_worker(rank: int, world_size: int, device: torch.device, job: TrainingJob) -> None:
    torch.manual_seed(derive_seed(job.plan.seed, "init"))  # for any freshly initialised weights
    model = sharded_model(job, world_size, device)  # FSDP: each worker reads its shards alone
    if model is None:
        model = RankClassificationModel(job.spec, job.adapter, job.gradient_checkpointing, job.shared_context)
        trained = distribute(model.to(device), job.strategy, world_size)
    else:
        trained = model
    model.train()  # from_pretrained gives eval mode
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=job.learning_rate, weight_decay=job.weight_decay)
    schedule = get_linear_schedule_with_warmup(optimizer, job.warmup_steps, job.train_steps)
    latest = job.checkpoints.latest()
    if latest is None:
        progress, training_state = Progress(), {"callbacks": []}
    else:  # every worker reads the shards it keeps, whoever wrote them
        state = job.checkpoints.load(latest, model, optimizer)
        progress, training_state = Progress(**state["progress"]), state["training_state"]
        schedule.load_state_dict(training_state["schedule"])
        if rank == 0:
            logger.info("Resuming from the checkpoint of step %d (%s)", progress.step, latest)
    collate = RankClassificationCollator(job.pad_token_id, job.max_length, model.shares_contexts)
    callbacks = _callbacks(job, rank, world_size, device, EngineView(trained, optimizer, schedule))
    for callback, state in zip(callbacks, training_state["callbacks"]):
        callback.load_state_dict(state)

    for callback in callbacks:
        callback.pre_train_loop()
    start, shown = progress.step, {}
    desc = f"Training (resumed from step {start})" if start else "Training"
    bar = Tqdm.tqdm(total=job.train_steps, initial=start, desc=desc, disable=rank != 0)
    for step in range(start, job.train_steps):
        epoch = job.plan.epoch_of(step)
        if step == start or step % job.plan.steps_per_epoch == 0:
            for callback in callbacks:
                if step != start:
                    callback.post_epoch(step, epoch - 1)
                callback.pre_epoch(step, epoch)

        # One optimizer step: this worker's micro-batches of the step's global batch.
        micro_batches = job.plan.micro_batches(step, rank, world_size)
        batch_loss = torch.zeros((), device=device)
        for n, (index, examples) in enumerate(micro_batches):
            batch = _to(collate([job.train[i] for i in examples]), device)
            for callback in callbacks:
                callback.pre_batch(step, epoch, batch)
            torch.manual_seed(derive_seed(job.plan.seed, "dropout", step, index))
            # Gradients are all-reduced once per step, with the last micro-batch's backward pass.
            last = n == len(micro_batches) - 1
            with gradient_sync(trained, enabled=last), torch.autocast(
                device.type, torch.bfloat16, enabled=job.precision == "bf16-mixed"
            ):
                loss = trained(**batch)["loss"] / len(micro_batches)
                loss.backward()
            batch_loss += loss.detach()
        if job.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(trainable, job.max_grad_norm)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        progress.step = step + 1
        bar.update(1)

        log = progress.step % job.log_every == 0 or job.is_checkpoint_step(progress.step)
        if log or callbacks:  # the same on every worker: the sum over workers is a collective
            loss_value = _sum_over_workers(batch_loss).item() / world_size
            for callback in callbacks:
                callback.post_batch(step, epoch, loss_value, [])
        if log:
            for callback in callbacks:
                callback.log_batch(step, epoch, loss_value, [])
            shown["loss"] = f"{loss_value:.4f}"
            bar.set_postfix(shown)

        if job.is_checkpoint_step(progress.step):
            if job.validation is not None:
                record = {"step": progress.step, "epoch": epoch, **validate(model, job, collate, rank, world_size, device)}
                progress.validations.append(record)
                best = progress.best
                for callback in callbacks:
                    callback.post_val_loop(step, epoch, record["val_acc"], best["val_acc"])
                shown.update(val_acc=f"{record['val_acc']:.4f}", best_val_acc=f"{best['val_acc']:.4f}")
                bar.set_postfix(shown)
            training_state = {
                "schedule": schedule.state_dict(),
                "callbacks": [callback.state_dict() for callback in callbacks],
            }
            job.checkpoints.save(model, optimizer, training_state, progress, rank, world_size)  # every rank
    bar.close()
    optimizer.state.clear()  # the optimizer state is in the checkpoints; the result needs the memory
    write_result(model, job.checkpoints, progress, job.work_dir, rank)
    last_epoch = job.plan.epoch_of(job.train_steps - 1)
    for callback in callbacks:
        callback.post_epoch(job.train_steps - 1, last_epoch)
        callback.post_train_loop(job.train_steps - 1, last_epoch)


def _callbacks(
    job: TrainingJob, rank: int, world_size: int, device: torch.device, engine: EngineView
) -> List[TrainCallback]:
    if not job.callbacks:
        return []
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
    return [
        callback.construct(
            workspace=job.workspace, train_config=config, training_engine=engine, dataset_dict=datasets,
            train_dataloader=None, validation_dataloader=None,
        )
        for callback in job.callbacks
    ]
