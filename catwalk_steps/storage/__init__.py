"""How results reach the disk: atomic writes, journals, disk space, digests, why a hub fetch failed."""
