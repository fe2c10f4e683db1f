"""How results reach the disk: atomic writes, journals, checksummed weights, digests."""
