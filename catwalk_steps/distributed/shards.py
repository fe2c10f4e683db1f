"""How the workers share out a split's requests: by instance, strided (:func:`strided_shards`),
for ``catwalk::predict``'s workers and for the eval tasks scored inside fine-tuning alike."""

from typing import List, Sequence


def strided_shards(instance_of: Sequence[int], workers: int) -> List[List[int]]:
    """Request indices per worker: every request of instance *i* goes to worker *i* mod ``workers``."""
    return [[q for q, instance in enumerate(instance_of) if instance % workers == rank] for rank in range(workers)]
