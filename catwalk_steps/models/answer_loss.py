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

from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

import torch
from tango.common.exceptions import ConfigurationError
from tango.integrations.torch import DataCollator

from .answer_rows import AnswerRow, answer_row, encoder_decoder_row
from .packing import packed_layout
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


def reference_row(conventions: "TokenConventions", prompt: str, answer: str, max_length: int, instance: Any = None,
                  task: int = 0) -> AnswerRow:
    """The row that learns ``answer`` and its EOS (:func:`encode_answer`) given ``prompt``, cut
    to the model's window of ``max_length`` tokens where the prompt starts (the answer is kept
    whole: one that, with its EOS, leaves no room for a token of prompt is an error)."""
    query = encode_answer(conventions, prompt, answer)
    if len(query.continuation) >= max_length:
        raise ConfigurationError(
            f"Instance {getattr(instance, 'id', '?')}: its answer and its end (EOS) make "
            f"{len(query.continuation) + int(conventions.encoder_decoder)} tokens, which leave no room for its prompt "
            f"in the model's context window of {max_length}"
        )
    if conventions.encoder_decoder:
        return encoder_decoder_row(query.context, query.continuation, max_length, instance, task)
    learnt = [False] * len(query.context) + [True] * len(query.continuation)
    row = answer_row(query.context + query.continuation, learnt, max_length, keep_start=False, instance=instance,
                     task=task)
    assert row is not None  # the whole answer is in the window
    return row


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


class AnswerCollator(DataCollator[AnswerRow]):
    """Collates answer rows (:class:`.answer_rows.AnswerRow`, or packs of them:
    :class:`.packing.Pack`) into one left-padded batch; rows are cut to the model's window where
    they are built. Holds only the pad id, the window and whether the model is an encoder-decoder,
    so it is cheap to send to DDP workers."""

    def __init__(self, pad_token_id: int, max_length: int, encoder_decoder: bool = False) -> None:
        self.pad_token_id = pad_token_id
        self.max_length = max_length
        self.encoder_decoder = encoder_decoder

    def __call__(self, rows: Sequence[AnswerRow]) -> Dict[str, Any]:
        queries = [Query(row.prompt, row.answer) for row in rows]
        masks = [row.answer_mask() for row in rows]
        batch = collate_queries(queries, self.pad_token_id, self.max_length, self.encoder_decoder,
                                None if all(all(mask) for mask in masks) else masks)
        if any(len(row.segments) > 1 for row in rows):
            batch.update(packed_layout([row.segments for row in rows], batch["input_ids"].shape[1]))
        return batch
