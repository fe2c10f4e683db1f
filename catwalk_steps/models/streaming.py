"""Loading a model's weights once, straight in the dtype they are used in.

``from_pretrained`` followed by ``load_state_dict`` holds the base weights and the fine-tuned
ones at once, and converting float32 files to bfloat16 through memory-mapped files keeps the
float32 pages resident too (measured: 6.2x the bfloat16 weights' bytes for a 355M model).
Here the model is built on the meta device (buffers excepted), and each tensor is read from its
safetensors file with ``safetensors.safe_open`` (any dtype safetensors knows) in slices of at
most ``CHUNK`` bytes into a tensor of the target dtype that then becomes the parameter. The file
is opened for each slice, so no memory-mapped page outlives it: peak memory is the weights in
the target dtype plus one slice.
"""

import json
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import torch
from accelerate import init_empty_weights
from safetensors import safe_open
from tango.common.exceptions import ConfigurationError
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, PreTrainedModel

CHUNK = 16 << 20


def read_tensors(path: Path, dtype: torch.dtype) -> Iterator[Tuple[str, torch.Tensor]]:
    """Each tensor of a safetensors file, floating-point ones converted to ``dtype`` a slice at a
    time (never the whole file, nor a whole tensor in its stored dtype, in memory)."""
    with safe_open(str(path), framework="pt") as f:
        names = list(f.keys())
    for name in names:
        yield name, read_tensor(path, name, dtype)


def read_tensor(path: Path, name: str, dtype: torch.dtype) -> torch.Tensor:
    """Tensor ``name`` of a safetensors file, in ``dtype`` if it is floating-point."""
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


def auto_class(config):
    """The HF auto class of a config: encoder-decoders (T5) are seq2seq LMs, the rest causal LMs."""
    return AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM


def empty_model(config, dtype: torch.dtype) -> PreTrainedModel:
    """The model of ``config`` with its parameters on the meta device (no memory) and its buffers
    (causal masks, rotary frequencies) real."""
    with init_empty_weights(include_buffers=False):
        return auto_class(config).from_config(config, dtype=dtype)


def fill_model(model: PreTrainedModel, tensors: Iterable[Tuple[str, torch.Tensor]]) -> PreTrainedModel:
    """Makes ``tensors`` the parameters of an :func:`empty_model` (no copy), then ties weights.

    Keys a checkpoint leaves out because they are tied (GPT-2's ``lm_head.weight``) may be
    missing; anything else missing, unexpected or of another shape is an error naming the keys.
    """
    state = dict(tensors)
    expected = model.state_dict()
    unexpected = [k for k in state if k not in expected]
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    buffers = dict(model.named_buffers())
    missing = [k for k in expected if k not in state and k not in tied and k not in buffers]
    mismatched = [k for k in expected if k in state and state[k].shape != expected[k].shape]
    if missing or unexpected or mismatched:
        raise ConfigurationError(
            f"Weights do not match {type(model).__name__}: missing keys: {_first(missing)}; "
            f"unexpected keys: {_first(unexpected)}; shape mismatches: {_first(mismatched)}"
        )
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    still_empty = [name for name, p in model.named_parameters() if p.is_meta]
    if still_empty:
        raise ConfigurationError(f"No weights for {_first(still_empty)}")
    return model.eval()


def _first(keys: List[str]) -> str:
    return ", ".join(keys[:5]) + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "") if keys else "none"


def tied_parameter_names(lm: torch.nn.Module) -> List[List[str]]:
    """The names of each parameter that several names share (GPT-2's ``lm_head.weight`` and
    ``transformer.wte.weight``), the first one the owner."""
    shared: Dict[int, List[str]] = {}
    for name, parameter in lm.named_parameters(remove_duplicate=False):
        shared.setdefault(id(parameter), []).append(name)
    return [names for names in shared.values() if len(names) > 1]


def safetensors_files(directory: Path) -> Optional[List[Path]]:
    """A saved model's safetensors files (one, or the shards of its index), if it has them."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [directory / shard for shard in shards]
    single = directory / "model.safetensors"
    return [single] if single.exists() else None


def model_from_files(config, files: List[Path], dtype: torch.dtype, aliases: Optional[Dict[str, str]] = None):
    """A model of ``config`` whose weights are read from ``files`` in ``dtype``. ``aliases``
    (name -> the name whose tensor it shares) restores ties recorded by our cache format."""

    def tensors() -> Iterator[Tuple[str, torch.Tensor]]:
        read: Dict[str, torch.Tensor] = {}
        for path in files:
            for name, tensor in read_tensors(path, dtype):
                read[name] = tensor
                yield name, tensor
        for alias, owner in (aliases or {}).items():
            yield alias, read[owner]

    return fill_model(empty_model(config, dtype), tensors())
