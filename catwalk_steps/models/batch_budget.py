"""``max_batch_tokens: "auto"``: a scoring worker's token budget from the memory left once its
model is loaded, so that batches fill the device without running out of it.

A fixed budget is either too small for a large GPU (each forward pass too little work to hide
the host's part) or too large for a small one. ``"auto"`` is resolved in each worker after the
weights are on its device: the free memory (CUDA: ``torch.cuda.mem_get_info``; CPU: the kernel's
``MemAvailable``, shared between the CPU workers of one host), less :data:`MARGIN`, divided by
an estimate of what one padded token costs in a forward pass (:func:`bytes_per_token`). Not in
the cache key: batching changes how fast, not what (within float rounding).
"""

import logging
import os
from typing import TYPE_CHECKING, Union

import torch
from tango.common.exceptions import ConfigurationError

from .output_layer import chunk_logits, output_layer

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

logger = logging.getLogger(__name__)

AUTO = "auto"
#: ``catwalk::predict``'s batching defaults, which in-loop evaluation batches by too (the same
#: batches, so the same numbers to the last bit).
DEFAULT_MAX_BATCH_SIZE = 32
DEFAULT_MAX_BATCH_TOKENS = 16384
#: Share of the free memory left unused. The estimate counts the tensors a forward pass makes
#: per token, not the allocator's caching and fragmentation, cuBLAS and attention workspaces,
#: or (on CPU) what other processes take meanwhile; a quarter covers them with room to spare.
MARGIN = 0.25


def chunk_bytes(device: torch.device) -> int:
    """The output layer's chunk of logits at scored positions (:func:`.output_layer.chunk_logits`)
    in float32, as logits, upcast and ``logsumexp`` temporaries."""
    return chunk_logits(device) * 4 * 3


def check_batch_tokens(value: object) -> None:
    """A ``max_batch_tokens`` setting must be a positive int or ``"auto"`` (checked when the step
    graph is built)."""
    if value == AUTO:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f'max_batch_tokens must be a positive integer or "auto", got {value!r}')


def free_memory(device: torch.device) -> int:
    """Bytes free on ``device`` now: CUDA's free memory, or the host's available memory (what the
    kernel can hand out without swapping, page cache included)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def bytes_per_token(config: "PretrainedConfig", dtype: torch.dtype, max_length: int, chunked_logits: bool) -> int:
    """An upper estimate of the memory one padded token of a scoring batch takes: its key/value
    cache in every layer (shared contexts keep it), one layer's activations at a time (hidden
    states, attention projections, the MLP's inner layer before and after its activation), the
    attention's scores against up to ``max_length`` positions in float32 (the math path; fused
    kernels take less), and, unless the output layer runs in chunks at scored positions
    (``chunked_logits``), the token's logits in ``dtype`` and float32 with a float32 temporary."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    width = config.hidden_size
    heads = config.num_attention_heads
    layers = config.num_hidden_layers + (getattr(config, "num_decoder_layers", None) or 0)
    inner = next((v for v in (getattr(config, n, None) for n in ("intermediate_size", "n_inner", "d_ff")) if v),
                 4 * width)
    head_width = getattr(config, "head_dim", None) or getattr(config, "d_kv", None) or width // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    size = torch.finfo(dtype).bits // 8
    cache = 2 * layers * kv_heads * head_width * size
    activations = (6 * width + 2 * inner) * size
    scores = 2 * heads * max_length * 4
    logits = 0 if chunked_logits else config.vocab_size * (size + 8)
    return cache + activations + scores + logits


def auto_batch_tokens(lm: "PreTrainedModel", device: torch.device, *, max_length: int, max_batch_size: int,
                      workers_sharing: int = 1) -> int:
    """The token budget ``"auto"`` stands for on ``device`` with ``lm`` loaded: ``(1 - MARGIN)``
    of the free memory (split between ``workers_sharing`` workers) over :func:`bytes_per_token`,
    at least one full-length query and at most what ``max_batch_size`` full-length queries can
    use (choices sharing a context count its cache copies: ``scoring.budget_batches``)."""
    dtype = next(lm.parameters()).dtype
    chunked = output_layer(lm) is not None
    usable = free_memory(device) * (1 - MARGIN) / max(1, workers_sharing) - (chunk_bytes(device) if chunked else 0)
    budget = int(usable // bytes_per_token(lm.config, dtype, max_length, chunked))
    return max(max_length + 1, min(budget, max_batch_size * (max_length + 1)))


def resolved_batch_tokens(setting: Union[int, str], lm: "PreTrainedModel", device: torch.device, **kwargs) -> int:
    """``setting`` itself, or for ``"auto"`` :func:`auto_batch_tokens` (logged)."""
    if setting != AUTO:
        return int(setting)
    budget = auto_batch_tokens(lm, device, **kwargs)
    logger.info("max_batch_tokens auto on %s: %d tokens (%.1f GiB free)", device, budget, free_memory(device) / 2**30)
    return budget
