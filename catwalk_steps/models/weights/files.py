"""Safetensors files: a saved model's files and their tensor names, tensors read a slice at a time
in the dtype they are used in, and the cache's own weights file, whose sha256 is recorded when
written and checked when read, so that reading executes no pickled code and a truncated or
altered file is reported, not loaded."""

import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ...storage.atomic import publish_file
from ...storage.hashing import sha256_of_file
from ...tango_fixes.damaged_entries import CorruptCacheError

#: The most bytes of a tensor read at once (see :func:`read_tensor`).
CHUNK = 16 << 20


def safetensors_files(directory: Path) -> Optional[List[Path]]:
    """A saved model's safetensors files (one, or the shards of its index), if it has them all."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        files = [directory / shard for shard in shards]
    else:
        files = [directory / "model.safetensors"]
    return files if all(path.exists() for path in files) else None


def tensor_names(path: Path) -> List[str]:
    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def read_tensors(path: Path, dtype: torch.dtype) -> Iterator[Tuple[str, torch.Tensor]]:
    """Each tensor of a safetensors file, floating-point ones converted to ``dtype`` a slice at a
    time (never the whole file, nor a whole tensor in its stored dtype, in memory)."""
    for name in tensor_names(path):
        yield name, read_tensor(path, name, dtype)


def read_tensor(path: Path, name: str, dtype: torch.dtype) -> torch.Tensor:
    """Tensor ``name`` of a safetensors file, in ``dtype`` if it is floating-point. The file is
    opened for each slice, so no memory-mapped page outlives it."""
    with safe_open(str(path), framework="pt") as f:
        view = f.get_slice(name)
        shape = view.get_shape()
        if not shape:  # a scalar
            tensor = f.get_tensor(name)
            return tensor.to(dtype) if tensor.is_floating_point() else tensor
        stored = view[0:0].dtype
    out = torch.empty(shape, dtype=dtype if stored.is_floating_point else stored)
    row_bytes = max(1, out[0].numel() * stored.itemsize) if shape[0] else 1
    rows = max(1, CHUNK // row_bytes)
    for start in range(0, shape[0], rows):
        with safe_open(str(path), framework="pt") as f:
            out[start:start + rows] = f.get_slice(name)[start:start + rows]
    return out


def _storage_key(tensor: torch.Tensor) -> Tuple[Any, ...]:
    return tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride()


def split_aliases(state_dict: Dict[str, torch.Tensor]) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """Tied weights (GPT-2's ``lm_head.weight`` is ``transformer.wte.weight``) share storage;
    safetensors stores each storage once, so the others are recorded as aliases."""
    unique: Dict[str, torch.Tensor] = {}
    aliases: Dict[str, str] = {}
    owners: Dict[Any, str] = {}
    for name, tensor in state_dict.items():
        key = _storage_key(tensor)
        if key in owners:
            aliases[name] = owners[key]
        else:
            owners[key] = name
            unique[name] = tensor.contiguous()
    return unique, aliases


def save_weights(state_dict: Dict[str, torch.Tensor], path: Path) -> Dict[str, Any]:
    """Writes CPU tensors to a safetensors file atomically; returns what :func:`read_weights`
    needs to read them back: the key order, the tied-weight aliases and the file's sha256."""
    unique, aliases = split_aliases(state_dict)
    for name, tensor in unique.items():
        if tensor.device.type != "cpu":
            raise ValueError(f"Refusing to cache {name} on {tensor.device}: results hold CPU tensors only")
    needed = sum(tensor.nbytes for tensor in unique.values())
    publish_file(path, lambda p: save_file(unique, str(p)), needed)
    return {"aliases": aliases, "keys": list(state_dict), "sha256": sha256_of_file(path)}


def check_sha256(path: Path, expected: str) -> None:
    """Raises :class:`CorruptCacheError` (a run then computes the entry again) if ``path`` is
    missing or not what was written."""
    try:
        actual = sha256_of_file(path)
    except FileNotFoundError:
        raise CorruptCacheError(f"{path} is missing") from None
    if actual != expected:
        raise CorruptCacheError(f"{path} does not match the checksum recorded when it was written")


def read_weights(path: Path, meta: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """Reads a file written by :func:`save_weights`, refusing one that was altered since."""
    check_sha256(path, meta["sha256"])
    unique = load_file(str(path))
    return {name: unique[name] if name in unique else unique[meta["aliases"][name]] for name in meta["keys"]}
