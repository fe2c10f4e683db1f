"""Log-probabilities of target tokens through a causal LM's output layer, at real targets only.

A batch's continuations are padded to its longest, and a plain forward pass computes and
normalises logits at every padded position too: [batch, longest, vocabulary] floats, 3 GB for 64
continuations of 245 tokens with GPT-2's 50,257 tokens, and most of the work where answer lengths
are long-tailed (PIQA's). Here the transformer gives its last hidden states and the output layer
runs only where a target is scored, a bounded number of rows at a time.

That is only right where the model's logits *are* its output layer applied to its last hidden
states. Models that do more (Gemma's soft-capping, Cohere's and Granite's scaling, ...) are
detected, by config and by comparing both ways once per model, and keep the plain path.
"""

import weakref
from typing import TYPE_CHECKING, Optional, Sequence, Tuple

import torch

from .forward_signature import cache_keyword

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Config fields of models whose forward changes the logits after the output layer.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "logit_softcapping")
#: Logits computed at once on CPU: 4M floats (16 MiB in float32, ~80 rows of a 50k vocabulary),
#: small enough to stay in cache for the passes of logsumexp (3x faster than 128 MiB chunks on CPU).
_CHUNK_LOGITS = 2**22
#: On a GPU, where caches do not decide and each chunk costs kernel launches: 32M floats (128 MiB
#: in float32, ~660 rows of a 50k vocabulary: most batches' targets in one chunk).
_GPU_CHUNK_LOGITS = 2**25
_checked: "weakref.WeakKeyDictionary[torch.nn.Module, bool]" = weakref.WeakKeyDictionary()


def chunk_logits(device: torch.device) -> int:
    """How many logits the output layer computes at once on ``device``."""
    return _CHUNK_LOGITS if device.type == "cpu" else _GPU_CHUNK_LOGITS


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-probability of each target under ``logits`` (``[..., vocabulary]``), in float32: the
    target's logit is gathered before normalising, so no log-softmax is materialised."""
    logits = logits.float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)


def masked_logprob_sums(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[batch]``: each row's summed :func:`token_logprobs` where ``mask`` is set."""
    return token_logprobs(logits, targets).masked_fill(~mask.bool(), 0.0).sum(-1)


def output_layer(lm: "PreTrainedModel", compare_logits: bool = True) -> Optional[torch.nn.Module]:
    """``lm``'s output layer if its logits are that layer applied to the hidden states of
    ``lm.base_model``, else ``None``. Checked once per model (in eval mode, without gradients);
    by its config alone without ``compare_logits`` (for weights not in memory yet, e.g. on the
    meta device before each worker loads its shards)."""
    head = lm.get_output_embeddings() if hasattr(lm, "get_output_embeddings") else None
    if lm not in _checked:
        plain = (
            head is not None
            and getattr(lm, "base_model", lm) is not lm
            and not lm.config.is_encoder_decoder
            and cache_keyword(lm.base_model) is not None
            and all(getattr(lm.config, name, None) in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS)
            and (not compare_logits or _same_logits(lm, head))
        )
        _checked[lm] = plain
    return head if _checked[lm] else None


def _same_logits(lm: "PreTrainedModel", head: torch.nn.Module) -> bool:
    device = next(lm.parameters()).device
    ids = torch.arange(8, device=device)[None] % lm.config.vocab_size
    training = lm.training
    lm.eval()
    try:
        with torch.no_grad():
            expected = lm(input_ids=ids, use_cache=False).logits
            found = head(lm.base_model(input_ids=ids, use_cache=False)[0])
    finally:
        lm.train(training)
    return expected.shape == found.shape and torch.allclose(expected.float(), found.float(), rtol=1e-4, atol=1e-5)


def hidden_states(lm: "PreTrainedModel", cache=None, **inputs: torch.Tensor) -> torch.Tensor:
    """The last hidden states of ``lm.base_model`` for ``inputs`` (extending ``cache`` if given)."""
    if cache is not None:
        inputs = {**inputs, cache_keyword(lm.base_model): cache, "use_cache": True}
    else:
        inputs = {**inputs, "use_cache": False}
    return lm.base_model(**inputs)[0]


def scored_positions(spans: Sequence[Tuple[int, int]]) -> torch.Tensor:
    """``[2, scored]``: the row and column of each scored position, where row ``r`` is scored
    at columns ``spans[r][0]`` up to ``spans[r][1]``, for :func:`target_logprob_sums`. Collators
    build it on the host with the batch, from the lengths they know: found on the device (from the
    mask), between the transformer and the output layer, the positions would make the host wait
    for the whole transformer (their count sets a shape) before it could queue the output layer."""
    rows = [row for row, (start, end) in enumerate(spans) for _ in range(start, end)]
    columns = [column for start, end in spans for column in range(start, end)]
    return torch.tensor([rows, columns], dtype=torch.long).reshape(2, -1)


def target_logprob_sums(
    lm: "PreTrainedModel", hidden: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
    scored: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """``[batch]``: each row's summed log-probabilities of ``targets`` where ``mask`` is set,
    from ``hidden`` (``[batch, positions, width]``) through the output layer at those positions
    only (``scored``: their :func:`scored_positions`, found here where not given). Summed over
    positions in the same order as a plain pass (zeros elsewhere)."""
    head = output_layer(lm)
    assert head is not None
    rows, columns = mask.bool().nonzero(as_tuple=True) if scored is None else scored
    selected, wanted = hidden[rows, columns], targets[rows, columns]
    step = max(1, chunk_logits(hidden.device) // lm.config.vocab_size)
    pieces = []
    for start in range(0, len(selected), step):
        pieces.append(token_logprobs(head(selected[start:start + step]), wanted[start:start + step]))
    logprobs = torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device)
    if pieces:
        logprobs = logprobs.index_put((rows, columns), torch.cat(pieces))
    return logprobs.sum(-1)
