"""The training-time model of generative fine-tuning and its collator: token-level cross-entropy
on an answer given its prompt.

The answer is the first reference followed by the tokenizer's EOS (so that the model learns to
stop); the prompt's tokens are read but not in the loss. The forward pass returns the
micro-batch's *summed* loss: the training loop divides it by the answer tokens of the whole
global batch (:mod:`catwalk_steps.kinds.generation`), so that a micro-batch holding few
answer tokens weighs no more per token than one holding many, whatever the micro-batching and
the device count. Tokens, padding and truncation follow :mod:`.scoring`: an answer is a
continuation like any other, and the same left-padded batch gives its summed log-likelihood.
"""

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import torch
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator

from .rank_classification import RankClassificationModel
from .scoring import Query, collate_queries, continuation_logliks

if TYPE_CHECKING:
    from .conventions import TokenConventions


def encode_answer(conventions: "TokenConventions", prompt: str, answer: str) -> Query:
    """The prompt's tokens and the answer's, then EOS (as
    :meth:`.conventions.TokenConventions.pair` splits them, so a model is trained on the tokens
    it is scored and prompted with). An encoder-decoder's scoring appends the EOS itself
    (:mod:`.seq2seq`)."""
    if conventions.encoder_decoder:
        return conventions.pair(prompt, answer)
    eos = conventions.tokenizer.eos_token_id
    if eos is None:
        raise ConfigurationError(
            f"Generative fine-tuning ends each answer with the tokenizer's EOS, so that the model learns to stop, and "
            f"the tokenizer of {conventions.tokenizer.name_or_path} has none: give the model a tokenizer with an "
            "eos_token (the step's tokenizer setting), or fine-tune under a chat template (apply_chat_template), "
            "whose end of turn ends each answer"
        )
    query = conventions.pair(prompt, answer)
    return Query(query.context, query.continuation + (eos,))


def scored_tokens(answer: Sequence[int], encoder_decoder: bool) -> int:
    """How many tokens of an answer the loss sums over: EOS included, wherever it is appended."""
    return len(answer) + int(encoder_decoder)


class AnswerLossModel(RankClassificationModel):
    """The language model of a generative fine-tune: the LM wrapper of rank classification
    (loading, adapter, gradient checkpointing, tied weights), scoring one answer per instance
    instead of choices. Contexts are never shared: an instance has one continuation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "shared_context": False})

    def forward(self, sequence_mask: Optional[torch.Tensor] = None, **batch: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``loss``: the summed negative log-likelihood of the batch's answer tokens (to be
        divided by the global batch's answer tokens); ``losses`` and ``tokens``: per instance.
        ``batch``: the tensors of :func:`.scoring.collate_queries`; ``sequence_mask``: packed
        rows' attention (:func:`packed_layout`), in place of the plain mask."""
        lm = self.scoring_lm
        if sequence_mask is not None:
            batch = {**batch, "attention_mask": sequence_mask}
        losses = -continuation_logliks(lm, **batch)
        tokens = batch["target_mask"].sum(-1) + int(lm.config.is_encoder_decoder)  # (see scored_tokens)
        return {"loss": losses.sum(), "losses": losses.detach(), "tokens": tokens}


class AnswerCollator(DataCollator[Dict[str, Any]]):
    """Collates ``{"prompt": ids, "answer": ids}`` items (with the answer's learnt ``mask``, for
    chat rows) into one left-padded batch; a prompt too
    long for the model's window is cut from the left (:func:`.scoring.model_input`). Holds only
    the pad id, the window and whether the model is an encoder-decoder, so it is cheap to send to
    DDP workers."""

    def __init__(self, pad_token_id: int, max_length: int, encoder_decoder: bool = False) -> None:
        self.pad_token_id = pad_token_id
        self.max_length = max_length
        self.encoder_decoder = encoder_decoder

    def __call__(self, items: List[Dict[str, Any]]) -> Dict[str, Any]:
        queries = [Query(tuple(item["prompt"]), tuple(item["answer"])) for item in items]
        masks = [item.get("mask") or [True] * len(item["answer"]) for item in items]
        batch = collate_queries(queries, self.pad_token_id, self.max_length, self.encoder_decoder,
                                masks if any("mask" in item for item in items) else None)
        if any("segments" in item for item in items):
            batch.update(packed_layout([item.get("segments") or [len(q.context) + len(q.continuation)]
                                        for item, q in zip(items, queries)], batch["input_ids"].shape[1]))
        return batch


def packed_layout(segments: List[List[int]], width: int) -> Dict[str, torch.Tensor]:
    """The position ids and attention mask of left-padded rows that each hold several sequences
    (``segments``: their lengths, in order; a row's input is all its tokens but the last): each
    sequence's positions from 0, and a ``[rows, 1, width, width]`` causal mask that lets a token
    see only the earlier tokens of its own sequence (SDPA on CPU ignores position ids, so the mask
    is what keeps packed sequences apart). The batch's 2-D ``attention_mask`` stays: it says
    which positions are tokens (what throughput counts); the model reads ``sequence_mask``."""
    position_ids = torch.zeros((len(segments), width), dtype=torch.long)
    sequence = torch.full((len(segments), width), -1, dtype=torch.long)  # -1: padding
    for row, lengths in enumerate(segments):
        positions = torch.cat([torch.arange(n) for n in lengths])[:-1]
        owners = torch.cat([torch.full((n,), k) for k, n in enumerate(lengths)])[:-1]
        position_ids[row, width - len(positions):] = positions
        sequence[row, width - len(owners):] = owners
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    same = (sequence[:, :, None] == sequence[:, None, :]) & (sequence[:, None, :] >= 0)
    # A padding position sees itself, so no row of the mask is empty (SDPA would give NaN).
    same |= torch.eye(width, dtype=torch.bool)
    return {"position_ids": position_ids, "sequence_mask": (same & causal)[:, None]}
