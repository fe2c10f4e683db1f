"""Scoring the choices of a multiple-choice instance against one encoding of their shared context.

The context goes through the model once; its key/value cache is then selected once per
continuation, and only the continuations run through the model again. For 4 choices of 25
tokens after a 60-token context that is 160 positions instead of 340. The numbers equal the
plain method's (``scoring.continuation_logliks``) up to float rounding, and so do the gradients:
the cache is an ordinary tensor of the autograd graph, so the backward pass through it is exact.
That is how training uses it (:class:`~.rank_classification.RankClassificationModel`).
"""

from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple

import torch

from .forward_signature import accepts_logits_to_keep, cache_keyword
from .padding import left_padded
from .output_layer import (
    hidden_states, masked_logprob_sums, output_layer, scored_positions, target_logprob_sums, token_logprobs,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def can_share_contexts(lm: "PreTrainedModel") -> bool:
    """Decoder-only models whose forward takes a cache and trims its logits. Not under gradient
    checkpointing, which turns the cache off in training."""
    return (
        not lm.config.is_encoder_decoder
        and accepts_logits_to_keep(lm)
        and cache_keyword(lm) is not None
        and not getattr(lm, "is_gradient_checkpointing", False)
    )


def collate_shared(
    contexts: Sequence[Tuple[int, ...]], continuations: Sequence[Sequence[Tuple[int, ...]]], pad_token_id: int
) -> Dict[str, torch.Tensor]:
    """Tensors for :func:`shared_context_logliks`: left-padded contexts (every context ends at the
    same place), and every group's continuations flattened in order, right-padded after their
    first token (which the context's last position predicts)."""
    context_ids, context_mask = left_padded(contexts, pad_token_id)
    flat = [c for conts in continuations for c in conts]
    rest = max(len(c) for c in flat) - 1
    inputs = torch.full((len(flat), rest), pad_token_id, dtype=torch.long)
    targets = torch.zeros((len(flat), rest), dtype=torch.long)
    mask = torch.zeros((len(flat), rest), dtype=torch.long)
    for row, c in enumerate(flat):
        inputs[row, : len(c) - 1] = torch.tensor(c[:-1])
        targets[row, : len(c) - 1] = torch.tensor(c[1:])
        mask[row, : len(c) - 1] = 1
    return {
        "context_ids": context_ids,
        "context_mask": context_mask,
        "group": torch.tensor([g for g, conts in enumerate(continuations) for _ in conts], dtype=torch.long),
        "first": torch.tensor([c[0] for c in flat], dtype=torch.long),
        "inputs": inputs,
        "targets": targets,
        "mask": mask,
        "scored": scored_positions([(0, len(c) - 1) for c in flat]),
    }


def shared_context_logliks(
    lm: "PreTrainedModel",
    context_ids: torch.Tensor,
    context_mask: torch.Tensor,
    group: torch.Tensor,
    first: torch.Tensor,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    scored: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Summed log-likelihood of each continuation of a :func:`collate_shared` batch, shape
    ``[continuations]`` (``scored``: ``mask``'s :func:`~.output_layer.scored_positions`, as
    collated). The padded batch must fit the model's context window: its longest context and its
    longest continuation together at most one token over it (its padding's positions run on past
    a shorter row's, and some models' masks are buffers the window's size). Callers batch so
    (``scoring.budget_batches``' ``max_width``, the training collator)."""
    from transformers import DynamicCache

    cache_argument = cache_keyword(lm)
    cache = DynamicCache()
    out = lm(
        input_ids=context_ids,
        attention_mask=context_mask,
        position_ids=(context_mask.cumsum(-1) - 1).clamp(min=0),
        **{cache_argument: cache},
        use_cache=True,
        logits_to_keep=1,
    )
    logliks = token_logprobs(out.logits[:, -1][group], first)  # each first token, from the context
    if inputs.shape[1] == 0:
        return logliks
    cache.batch_select_indices(group)  # one copy of its context's cache per continuation
    continued = dict(
        input_ids=inputs,
        attention_mask=torch.cat([context_mask[group], mask], dim=1),
        position_ids=context_mask.sum(-1)[group][:, None] + torch.arange(inputs.shape[1], device=inputs.device),
    )
    if output_layer(lm) is not None:  # logits at real targets only, not at the padding
        return logliks + target_logprob_sums(lm, hidden_states(lm, cache, **continued), targets, mask, scored)
    out = lm(**continued, **{cache_argument: cache}, use_cache=True)
    return logliks + masked_logprob_sums(out.logits, targets, mask)
