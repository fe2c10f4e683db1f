"""Seeds derived from the run's seed, one per purpose.

Adding to a seed (``seed + rank``, ``seed + epoch``) makes runs collide: seed 42's second epoch
would be seed 43's first. A hash of the whole path never collides in practice.
"""

import hashlib


def derive_seed(seed: int, *purpose: object) -> int:
    """A 63-bit seed for ``purpose`` (e.g. ``("dropout", step, micro_batch)``) of the run ``seed``."""
    digest = hashlib.sha256(repr((seed,) + purpose).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
