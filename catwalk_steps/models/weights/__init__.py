"""Model weights in and out: the one place that reads and writes them.

Each load of a model enters here once, through one of:

- :func:`load_pretrained`: a spec's pretrained model, its weights streamed in the dtype asked for
  into a model built on the meta device (:mod:`.meta_model`) from its safetensors files: a local
  directory saved with ``save_pretrained``, or a hub model's configs and safetensors files
  fetched into the HF cache (:func:`pretrained_directory`). Files that name the weights otherwise
  (a base model's checkpoint, an older transformers' names) or a hub model without safetensors
  files load through ``from_pretrained``, in the same dtype.
- :func:`load_with_weights`: the spec's model holding given tensors (fine-tuned weights in memory).
- :func:`load_saved`: the spec's model holding the weights of a cache file (:func:`save_weights`).
- :func:`load_own_shards`: under FSDP, the model sharded by the caller, each worker reading only
  the shards it keeps (:mod:`.sharded`).

Weights are written by :func:`save_weights` (the cache's checksummed safetensors file, tied
weights stored once) and :func:`write_full_weights` (sharded workers writing one file together).
:func:`empty_model` and :func:`tied_parameter_names` tell a model's parameters without reading any.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

import torch

from ..loading import ModelSpec, local_directory
from .files import check_sha256, read_weights, safetensors_files, save_weights
from .meta_model import (
    auto_class, empty_model, files_name_every_weight, fill_model, filled_from_files, tied_aliases, tied_parameter_names,
)
from .sharded import read_own_shards, write_full_weights

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "check_sha256", "empty_model", "load_own_shards", "load_pretrained", "load_saved", "load_with_weights",
    "pretrained_directory", "read_weights", "save_weights", "tied_parameter_names", "write_full_weights",
]

#: What is fetched of a hub model for its weights: its configs and its safetensors files, whole
#: or sharded (not the other formats' copies, nor a repository's original-format files).
HUB_FILES = ["*.json", "model.safetensors", "model-*-of-*.safetensors"]


def pretrained_directory(spec: ModelSpec) -> Path:
    """The directory of ``spec``'s pretrained files: a local one, or the hub's configs and
    safetensors files fetched into the HF cache (found there offline)."""
    directory = local_directory(spec.pretrained)
    if directory is not None:
        return directory
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(spec.pretrained, revision=spec.revision, allow_patterns=HUB_FILES))
    except (OSError, ValueError) as e:  # the hub's errors are OSErrors, a malformed name a ValueError
        raise spec.cannot_load("model weights", spec.pretrained, e) from e


def load_pretrained(spec: ModelSpec, dtype: torch.dtype = torch.float32) -> "PreTrainedModel":
    """The pretrained model of ``spec`` in ``dtype`` (an ``AutoModelForSeq2SeqLM`` for
    encoder-decoder configs such as T5, else an ``AutoModelForCausalLM``), in eval mode."""
    config = spec.load_config()
    files = safetensors_files(pretrained_directory(spec))
    model = empty_model(config, dtype)
    if files and files_name_every_weight(model, files):
        return filled_from_files(model, files, dtype)
    try:
        lm = auto_class(config).from_pretrained(spec.source(), config=config, dtype=dtype, revision=spec.revision)
    except OSError as e:  # the config was at hand, the weights were not
        raise spec.cannot_load("model weights", spec.pretrained, e) from e
    return lm.eval()


def load_with_weights(
    spec: ModelSpec, state_dict: Dict[str, torch.Tensor], dtype: torch.dtype = torch.float32
) -> "PreTrainedModel":
    """The model of ``spec``'s config holding exactly ``state_dict`` in ``dtype`` (the base
    weights are never read), in eval mode."""
    # Copies, also in the same dtype: tensors read by safetensors can sit at unaligned addresses,
    # where CPU kernels round differently from freshly allocated ones. (fill_model ties tied weights again.)
    cast = ((k, v.to(dtype if v.is_floating_point() else v.dtype, copy=True)) for k, v in state_dict.items())
    return fill_model(empty_model(spec.load_config(), dtype), cast)


def load_saved(spec: ModelSpec, path: Path, meta: Dict[str, Any], dtype: torch.dtype = torch.float32) -> "PreTrainedModel":
    """The model of ``spec``'s config holding the weights :func:`save_weights` wrote to ``path``
    (``meta``: what it returned; its checksum is checked when the cache entry is read), read
    once, in ``dtype``."""
    return filled_from_files(empty_model(spec.load_config(), dtype), [path], dtype, meta["aliases"])


def load_own_shards(
    spec: ModelSpec, shard: Callable[["PreTrainedModel"], torch.nn.Module], device: torch.device
) -> Optional[torch.nn.Module]:
    """What ``shard`` makes of ``spec``'s model built on the meta device (float32, tied weights
    tied, so that they are sharded once), with each worker's shards alone read from the
    pretrained safetensors files: no worker holds the whole model. ``None``, having read
    nothing, where the model has no safetensors files naming its parameters: the caller then
    loads it whole (:func:`load_pretrained`)."""
    directory = pretrained_directory(spec)
    files = safetensors_files(directory)
    lm = empty_model(spec.load_config(), torch.float32)
    if not files or not files_name_every_weight(lm, files):
        return None
    aliases = tied_aliases(lm)
    model = shard(lm)
    read_own_shards(model, lm, aliases, directory, device)
    return model
