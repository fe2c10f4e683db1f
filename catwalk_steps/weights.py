"""The cached result of fine-tuning: CPU weights in safetensors, plus JSON saying what they belong to.

Reading it executes no pickled code, and a truncated or altered weights file is reported, not
loaded: its sha256 is recorded when written and checked when read.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict

import torch
from safetensors.torch import load_file, save_file
from tango.common.aliases import PathOrStr
from tango.format import Format

from .atomic import replace_atomically
from .models.loading import ModelSpec
from .tasks.task import sha256_of_file

WEIGHTS_FILE = "model.safetensors"
META_FILE = "model.json"


class CorruptCacheError(RuntimeError):
    """A cached result whose files do not match what was recorded when it was written."""


@dataclass
class FinetunedModel:
    """Fine-tuned weights (a CPU state dict of the HF model) and the spec they fit."""

    spec: ModelSpec
    state_dict: Dict[str, torch.Tensor]
    #: What training reported, e.g. the best validation accuracy and the step it came from.
    training_metrics: Dict[str, Any] = field(default_factory=dict)

    def load_model(self):
        return self.spec.load_model(self.state_dict)


def _storage_key(tensor: torch.Tensor):
    return tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride()


def _split_aliases(state_dict: Dict[str, torch.Tensor]):
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


def cpu_state_dict(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """A CPU copy of ``module``'s state dict in which tied weights stay one tensor."""
    copies: Dict[Any, torch.Tensor] = {}
    state_dict = {}
    for name, tensor in module.state_dict().items():
        key = _storage_key(tensor)
        if key not in copies:
            copies[key] = tensor.detach().cpu()
        state_dict[name] = copies[key]
    return state_dict


def save_state_dict(state_dict: Dict[str, torch.Tensor], path: Path) -> Dict[str, Any]:
    """Writes CPU tensors to a safetensors file atomically; returns what :func:`load_state_dict`
    needs to read them back: the key order, the tied-weight aliases and the file's sha256."""
    unique, aliases = _split_aliases(state_dict)
    for name, tensor in unique.items():
        if tensor.device.type != "cpu":
            raise ValueError(f"Refusing to cache {name} on {tensor.device}: results hold CPU tensors only")
    replace_atomically(path, lambda p: save_file(unique, str(p)))
    return {"aliases": aliases, "keys": list(state_dict), "sha256": sha256_of_file(path)}


def load_state_dict(path: Path, meta: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """Reads a file written by :func:`save_state_dict`, refusing one that was altered since."""
    if sha256_of_file(path) != meta["sha256"]:
        raise CorruptCacheError(
            f"{path} does not match the checksum recorded when it was written; "
            "delete this cache entry and run again"
        )
    unique = load_file(str(path))
    return {name: unique[name] if name in unique else unique[meta["aliases"][name]] for name in meta["keys"]}


@Format.register("catwalk::finetuned_model")
class FinetunedModelFormat(Format[FinetunedModel]):
    VERSION = "1"

    def write(self, artifact: FinetunedModel, dir: PathOrStr) -> None:
        dir = Path(dir)
        meta = {
            "spec": artifact.spec.to_json(),
            **save_state_dict(artifact.state_dict, dir / WEIGHTS_FILE),
            "training_metrics": artifact.training_metrics,
        }
        replace_atomically(dir / META_FILE, lambda p: p.write_text(json.dumps(meta, indent=2)))

    def read(self, dir: PathOrStr) -> FinetunedModel:
        dir = Path(dir)
        meta = json.loads((dir / META_FILE).read_text())
        state_dict = load_state_dict(dir / WEIGHTS_FILE, meta)
        return FinetunedModel(ModelSpec(**meta["spec"]), state_dict, meta["training_metrics"])
