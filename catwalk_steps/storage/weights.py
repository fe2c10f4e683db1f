"""Weights on disk: CPU tensors in a safetensors file, their sha256 recorded when written and
checked when read, so that reading executes no pickled code and a truncated or altered file is
reported, not loaded."""

from pathlib import Path
from typing import Any, Dict, Tuple

import torch
from safetensors.torch import load_file, save_file

from ..tango_fixes.damaged_entries import CorruptCacheError
from .atomic import publish_file
from .hashing import sha256_of_file


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


def save_state_dict(state_dict: Dict[str, torch.Tensor], path: Path) -> Dict[str, Any]:
    """Writes CPU tensors to a safetensors file atomically; returns what :func:`load_state_dict`
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


def load_state_dict(path: Path, meta: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """Reads a file written by :func:`save_state_dict`, refusing one that was altered since."""
    check_sha256(path, meta["sha256"])
    unique = load_file(str(path))
    return {name: unique[name] if name in unique else unique[meta["aliases"][name]] for name in meta["keys"]}
