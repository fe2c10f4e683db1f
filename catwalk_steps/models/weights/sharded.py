"""Weights that no single worker holds whole: each worker reads only its own shards of the
pretrained files, and writes only its own shards of the result, with
``torch.distributed.checkpoint``'s Hugging Face reader and writer (safetensors files), imported
only when a model is sharded: reading a cache entry needs none of it."""

import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from ...storage.hashing import sha256_of_file
from ...storage.space import reporting_full_disk


def read_own_shards(
    model: torch.nn.Module, lm: torch.nn.Module, aliases: List[str], directory: Path, device: torch.device
) -> None:
    """Fills ``model`` (sharded already, its parameters still on the meta device; ``lm`` the HF
    model inside it, ``aliases`` its tied names that are another's) with its shards of the
    safetensors files in ``directory``: each worker materialises and reads only the shards it keeps."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    buffers = {name: buffer.clone() for name, buffer in model.named_buffers()}  # real, and kept
    model.to_empty(device=device)
    for name, buffer in model.named_buffers():
        buffer.copy_(buffers[name])
    state = get_model_state_dict(lm)
    dcp.load({k: v for k, v in state.items() if k not in aliases}, storage_reader=dcp.HuggingFaceStorageReader(str(directory)))
    set_model_state_dict(lm, state)


def write_full_weights(lm: torch.nn.Module, aliases: Dict[str, str], path: Path, rank: int) -> Optional[Dict[str, Any]]:
    """Writes ``lm``'s weights as one safetensors file of full tensors at ``path`` (every worker
    must call): each worker writes its shards, then they are consolidated tensor by tensor,
    without any worker gathering the whole model. ``aliases`` (tied name -> owner) are stored
    once. Returns, on rank 0, what :func:`.files.read_weights` needs to read the file back;
    ``None`` on the other ranks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    weights = get_model_state_dict(lm)  # each worker's shards (under DDP, the replica)
    keys = list(weights)
    scratch = path.parent / "hf"
    writer = dcp.HuggingFaceStorageWriter(str(scratch), save_distributed=True, enable_consolidation=True)
    with reporting_full_disk(path):
        dcp.save({k: v for k, v in weights.items() if k not in aliases}, storage_writer=writer)
    if rank != 0:
        return None
    (consolidated,) = scratch.glob("model-*.safetensors")
    os.replace(consolidated, path)
    shutil.rmtree(scratch)
    return {"aliases": aliases, "keys": keys, "sha256": sha256_of_file(path)}
