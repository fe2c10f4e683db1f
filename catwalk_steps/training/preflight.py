"""Fail before the hour, not after it: before fine-tuning loads a model or trains a step, its work
dir and cache entry must be writable and their filesystem must have room for what the run will
write, else it fails with the bytes needed against those free, and the fix
(:func:`..storage.space.check_room`).

What a run writes is estimated without reading a weight: the model is built from its config on the
meta device (with the adapter, if any), and the optimizer the loop would build is stepped once on
meta gradients, so the optimizer's own state (AdamW's two moments, SGD's momentum or none, ...) is
counted, whatever the optimizer; a checkpoint's bytes are then those of the very state dicts the
checkpoint code hands to DCP (:func:`.checkpoints.checkpoint_state`: the trainable weights and
their optimizer state, a tied weight under each of its names). The result holds the trainable
weights, a tied one once (the cache entry is a hard link to it). Weights and optimizer state are
float32 under either precision (``bf16-mixed`` keeps float32 master weights).
Tested within 2x of the bytes really on disk (``tests/test_full_disk.py``).
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..storage.space import check_room, disk_bytes, human_bytes
from .checkpoints import checkpoint_state, state_bytes
from .optimizers import build_optimizer

if TYPE_CHECKING:
    from .loop import TrainingJob

#: Bytes on disk per tensor besides its data: DCP writes each as a record of its own (measured on
#: the demo's model: ~1.7 KiB each, plus ~0.3 KiB in ``.metadata``); safetensors, ~0.1 KiB.
PER_TENSOR = 4 << 10


def _tensors(state) -> int:
    if isinstance(state, torch.Tensor):
        return 1
    if isinstance(state, dict):
        return sum(_tensors(value) for value in state.values())
    return sum(_tensors(value) for value in state) if isinstance(state, (list, tuple)) else 0


@dataclass
class DiskNeeds:
    """The bytes a fine-tuning run puts on disk."""

    parameters: int  #: trainable parameters
    result: int  #: the result's weights file
    checkpoint: int  #: one checkpoint: the trainable weights and their optimizer state
    checkpoints: int  #: how many checkpoints the run writes
    consolidated: bool  #: several workers write the result in shards, then one file of them

    @property
    def peak(self) -> int:
        """The most bytes on disk at once: while a checkpoint is written, the latest and the best
        ones are still kept (three at once); at the end the two kept ones and the result (twice
        over while several workers' shards are consolidated into one file)."""
        while_checkpointing = min(self.checkpoints, 3) * self.checkpoint
        at_the_end = min(self.checkpoints, 2) * self.checkpoint + self.result * (2 if self.consolidated else 1)
        return max(while_checkpointing, at_the_end)


def disk_needs(job: "TrainingJob", world_size: int) -> DiskNeeds:
    """What ``job`` will write on ``world_size`` workers (see the module's docstring)."""
    from ..models.rank_classification import RankClassificationModel
    from ..models.weights import empty_model

    lm = empty_model(job.spec.load_config(), torch.float32)
    lm.tie_weights()  # tied names share one parameter, counted once
    model = RankClassificationModel(job.spec, job.adapter, lm=lm)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(model, job.optimizer, job.learning_rate, job.weight_decay, job.decay_biases_and_norms)
    for p in trainable:
        p.grad = torch.empty_like(p)
    optimizer.step()  # on the meta device: creates the state's tensors, allocates none
    checkpoint = checkpoint_state(model, optimizer)
    return DiskNeeds(
        parameters=sum(p.numel() for p in trainable),
        result=sum(p.nbytes + PER_TENSOR for p in trainable),  # a tied weight once
        checkpoint=state_bytes(checkpoint) + PER_TENSOR * _tensors(checkpoint),
        checkpoints=math.ceil(job.train_steps / job.validate_every),
        consolidated=world_size > 1 and job.adapter is None,
    )


def check_disk_space(job: "TrainingJob", world_size: int) -> None:
    """Raises :class:`..storage.space.NotEnoughSpaceError` unless ``job``'s work dir (and its
    cache entry, in a local workspace) is writable and has room for what the run will write, less
    what an interrupted run already wrote there."""
    needs = disk_needs(job, world_size)
    work_dir = Path(job.work_dir)
    directories = {work_dir: max(0, needs.peak - disk_bytes(work_dir))}
    step_dir = getattr(job.workspace, "step_dir", None)  # a local workspace's entry: a hard link, no bytes
    if step_dir is not None and job.step_id:
        directories.setdefault(Path(step_dir(job.step_id)), 0)
    check_room(
        directories,
        f"fine-tuning {job.spec.pretrained} ({needs.parameters:,} trainable parameters: checkpoints of "
        f"{human_bytes(needs.checkpoint)} (weights and optimizer state), up to {min(needs.checkpoints, 3)} at once, "
        f"and a result of {human_bytes(needs.result)})",
    )
