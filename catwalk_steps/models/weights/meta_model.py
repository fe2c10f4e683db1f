"""A model built without its weights, then given them: read once, straight in the dtype they are
used in.

``from_pretrained`` followed by ``load_state_dict`` holds the base weights and the fine-tuned
ones at once, and converting float32 files to bfloat16 through memory-mapped files keeps the
float32 pages resident too (measured: 6.2x the bfloat16 weights' bytes for a 355M model).
Here the model is built on the meta device (buffers excepted), and each tensor, read a slice at
a time into a tensor of the target dtype (:func:`.files.read_tensor`), becomes the parameter:
peak memory is the weights in the target dtype plus one slice.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
from tango.common.exceptions import ConfigurationError

from .files import read_tensors, tensor_names

if TYPE_CHECKING:  # imported where a model is built: reading a cache entry needs no transformers
    from transformers import PreTrainedModel


def auto_class(config):
    """The HF auto class of a config: encoder-decoders (T5) are seq2seq LMs, the rest causal LMs."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM


def empty_model(config, dtype: torch.dtype) -> "PreTrainedModel":
    """The model of ``config`` with its parameters on the meta device (no memory) and its buffers
    (causal masks, rotary frequencies) real."""
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        return auto_class(config).from_config(config, dtype=dtype)


def tied_parameter_names(lm: torch.nn.Module) -> List[List[str]]:
    """The names of each parameter that several names share (GPT-2's ``lm_head.weight`` and
    ``transformer.wte.weight``), the first one the owner."""
    shared: Dict[int, List[str]] = {}
    for name, parameter in lm.named_parameters(remove_duplicate=False):
        shared.setdefault(id(parameter), []).append(name)
    return [names for names in shared.values() if len(names) > 1]


def tied_aliases(lm: torch.nn.Module) -> List[str]:
    """The names of ``lm``'s parameters that are another name's (see :func:`tied_parameter_names`)."""
    return [name for names in tied_parameter_names(lm) for name in names[1:]]


def files_name_every_weight(lm: "PreTrainedModel", files: List[Path]) -> bool:
    """Whether ``files`` hold a tensor under each name of ``lm``'s own parameters (a tied alias
    may be left out). Not so for checkpoints written under other names: the base model's alone
    (GPT-2's hub files lack the ``transformer.`` prefix) or an older transformers' names, which
    ``from_pretrained`` renames."""
    lm.tie_weights()
    stored = {name for path in files for name in tensor_names(path)}
    return not {name for name, _ in lm.named_parameters()} - set(tied_aliases(lm)) - stored


def fill_model(model: "PreTrainedModel", tensors: Iterable[Tuple[str, torch.Tensor]]) -> "PreTrainedModel":
    """Makes ``tensors`` the parameters of an :func:`empty_model` (no copy), then ties weights.

    Keys a checkpoint leaves out because they are tied (GPT-2's ``lm_head.weight``, BART's
    encoder and decoder embeddings) may be missing; anything else missing, unexpected or of
    another shape is an error naming the keys.
    """
    state = dict(tensors)
    expected = model.state_dict()
    unexpected = [k for k in state if k not in expected]
    model.tie_weights()  # the ties a checkpoint relies on, as structure: each alias's owner comes first
    tied = set(tied_aliases(model))
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


def filled_from_files(
    model: "PreTrainedModel", files: List[Path], dtype: torch.dtype, aliases: Optional[Dict[str, str]] = None
) -> "PreTrainedModel":
    """An :func:`empty_model` whose weights are read from ``files`` in ``dtype``. ``aliases``
    (name -> the name whose tensor it shares) restores ties recorded by our cache format."""

    def tensors() -> Iterator[Tuple[str, torch.Tensor]]:
        read: Dict[str, torch.Tensor] = {}
        for path in files:
            for name, tensor in read_tensors(path, dtype):
                read[name] = tensor
                yield name, tensor
        for alias, owner in (aliases or {}).items():
            yield alias, read[owner]

    return fill_model(model, tensors())
