"""Samplers that make a training run independent of how many processes share it.

With ``batch_size`` as the *global* batch, step ``k`` of every run trains on the same examples:
one permutation per epoch (from ``seed + epoch``, whatever the world size), each rank taking
every ``world_size``-th example of it. Validation shards are padded with zero-weight copies
instead of the repeated real samples of ``DistributedSampler``, so the accuracy is exact.
"""

from typing import Any, Dict, Iterator, Sequence

import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler


def _world() -> "tuple[int, int]":
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class GlobalOrderSampler(DistributedSampler):
    """Shuffled, rank-sharded training order that is the same for any world size.

    Unlike ``DistributedSampler`` it also works without a process group, and moves to the next
    epoch on its own: Tango calls ``set_epoch()`` only in distributed runs, and a single-process
    run must see the same epoch permutations as a distributed one.
    """

    def __init__(self, dataset: Dataset, data_source: Any = None, *, seed: int) -> None:
        world_size, rank = _world()
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self._next_epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self._next_epoch = epoch

    def __iter__(self) -> Iterator[int]:
        super().set_epoch(self._next_epoch)
        self._next_epoch += 1
        return super().__iter__()


class PaddedShardSampler(DistributedSampler):
    """In-order shards of equal length; indices past the data are padding (see :class:`PaddedDataset`).

    Every rank must run the same number of validation batches, because ``forward()`` sums
    the metric over ranks in each of them.
    """

    def __init__(self, dataset: Sequence, data_source: Any = None) -> None:
        world_size, rank = _world()
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=False)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.total_size, self.num_replicas))


class PaddedDataset(Dataset):
    """A list of examples in which index ``len + i`` is example ``i`` with weight 0."""

    def __init__(self, examples: Sequence[Dict[str, Any]]) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Dict[str, Any]:
        if index < len(self.examples):
            return self.examples[index]
        return {**self.examples[index % len(self.examples)], "weight": 0.0}
