"""Digests of files and values, for cache keys and for checking what was written."""

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, Tuple

#: sha256 per (path, size, mtime): a process hashes an unchanged file once. Kept in memory only,
#: never in the user's home directory.
_file_digests: Dict[Tuple[str, int, int], str] = {}


def sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def remembered_sha256_of_file(path: Path) -> str:
    """:func:`sha256_of_file`, remembered for this process while the file's size and mtime stay."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _file_digests:
        _file_digests[key] = sha256_of_file(path)
    return _file_digests[key]


def fingerprint(value: Any) -> str:
    """A digest of a JSON-serialisable value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
