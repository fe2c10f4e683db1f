"""Which examples each optimizer step and each micro-batch sees, for any number of devices.

The unit of work is the *micro-batch*: ``micro_batch_size`` consecutive examples of a step's
global batch. Step ``k`` of epoch ``e`` trains on examples ``k*B .. (k+1)*B`` of epoch ``e``'s
permutation, cut into ``B / micro_batch_size`` micro-batches; with ``W`` workers, worker ``r``
runs micro-batches ``r, r+W, ...``. So the micro-batches (and the dropout seed of each, see
:mod:`.loop`) are the same on 1 device as on 8. An epoch's remainder (``len % B`` examples) is
left out of that epoch, so every optimizer step is a whole global batch; each epoch has its own
permutation, so every example is still seen.
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import List, Tuple

import torch

from .seeds import derive_seed


@dataclass(frozen=True)
class BatchPlan:
    num_examples: int
    batch_size: int
    micro_batch_size: int
    seed: int

    def __post_init__(self) -> None:
        if self.batch_size % self.micro_batch_size:
            raise ValueError(f"batch_size={self.batch_size} is not a multiple of micro_batch_size={self.micro_batch_size}")

    @property
    def steps_per_epoch(self) -> int:
        return self.num_examples // self.batch_size

    @property
    def micro_batches_per_step(self) -> int:
        return self.batch_size // self.micro_batch_size

    def epoch_of(self, step: int) -> int:
        return step // self.steps_per_epoch

    @lru_cache(maxsize=2)
    def epoch_order(self, epoch: int) -> List[int]:
        generator = torch.Generator().manual_seed(derive_seed(self.seed, "order", epoch))
        return torch.randperm(self.num_examples, generator=generator).tolist()

    def step_examples(self, step: int) -> List[int]:
        """The global batch of optimizer step ``step`` (counted from 0 over all epochs)."""
        epoch, k = divmod(step, self.steps_per_epoch)
        return self.epoch_order(epoch)[k * self.batch_size:(k + 1) * self.batch_size]

    def micro_batches(self, step: int, rank: int, world_size: int) -> List[Tuple[int, List[int]]]:
        """``(index in the step, example indices)`` of each micro-batch worker ``rank`` runs."""
        if self.micro_batches_per_step % world_size:
            raise ValueError(f"{self.micro_batches_per_step} micro-batches per step cannot be shared by {world_size} workers")
        examples = self.step_examples(step)
        size = self.micro_batch_size
        return [(j, examples[j * size:(j + 1) * size]) for j in range(rank, self.micro_batches_per_step, world_size)]
