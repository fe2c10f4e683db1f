"""Which examples each optimizer step and each micro-batch sees, for any number of devices.

The unit of work is the *micro-batch*: ``micro_batch_size`` consecutive examples of a step's
global batch. Step ``k`` of epoch ``e`` trains on examples ``k*B .. (k+1)*B`` of epoch ``e``'s
permutation, cut into ``B / micro_batch_size`` micro-batches; with ``W`` workers, worker ``r``
runs micro-batches ``r, r+W, ...``. So the micro-batches (and the dropout seed of each, see
:mod:`.loop`) are the same on 1 device as on 8. An epoch's remainder (``len % B`` examples) is
left out of that epoch, so every optimizer step is a whole global batch; each epoch has its own
permutation, so every example is still seen.

Packed rows (``packing: true``) are trained as TRL trains them: an epoch's last batch holds the
packs that are left (``keep_partial``), since their count is the packer's, not the user's. Its
micro-batches are cut the same way (the last one shorter), so they too are the same on any
number of devices; a worker that has fewer of them than another runs stand-ins that count for
nothing (:meth:`BatchPlan.stand_ins`), so that every worker makes as many forward and backward
passes, which DDP and FSDP synchronise.
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import List, Optional, Tuple

import torch
from tango.common.exceptions import ConfigurationError

from .seeds import derive_seed


def micro_batch_size_for(batch_size: int, micro_batch_size: Optional[int], workers: int) -> int:
    """The micro-batch size (default: ``batch_size``), after checking that the global batch splits
    into whole micro-batches that ``workers`` can share equally: the one batching check, made when
    the step graph is built and again by every plan."""
    micro = batch_size if micro_batch_size is None else micro_batch_size
    if micro < 1 or batch_size % micro:
        raise ConfigurationError(f"micro_batch_size={micro} must be a positive divisor of batch_size={batch_size}")
    if (batch_size // micro) % workers:
        raise ConfigurationError(
            f"batch_size={batch_size} makes {batch_size // micro} micro-batch(es) of {micro}, which "
            f"device_count={workers} workers cannot share equally: set micro_batch_size (per device) so "
            f"that batch_size is a multiple of micro_batch_size*device_count, e.g. "
            f"micro_batch_size={batch_size // workers} if that divides. It is part of the cache key: keep it "
            "when you change device_count, and you get the same model"
        )
    return micro


@dataclass(frozen=True)
class BatchPlan:
    num_examples: int
    batch_size: int
    micro_batch_size: int
    seed: int
    #: An epoch's remainder is its last, smaller batch, instead of being left out.
    keep_partial: bool = False

    def __post_init__(self) -> None:
        micro_batch_size_for(self.batch_size, self.micro_batch_size, 1)

    @property
    def steps_per_epoch(self) -> int:
        whole = self.num_examples // self.batch_size
        return whole + int(self.keep_partial and self.num_examples % self.batch_size > 0)

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
        micro_batch_size_for(self.batch_size, self.micro_batch_size, world_size)
        examples = self.step_examples(step)
        size = self.micro_batch_size
        return [(j, examples[j * size:(j + 1) * size]) for j in range(rank, -(-len(examples) // size), world_size)]

    def stand_ins(self, step: int, rank: int, world_size: int) -> int:
        """How many passes that count for nothing worker ``rank`` adds to its micro-batches of
        ``step``, so that it makes as many passes as worker 0 (only in a partial batch)."""
        return len(self.micro_batches(step, 0, world_size)) - len(self.micro_batches(step, rank, world_size))
