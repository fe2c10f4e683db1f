"""Rank classification with encoder-decoder models (T5, Flan-T5): the context goes to the
encoder, and the decoder scores each continuation.

Queries are tokenised as lm-evaluation-harness's seq2seq path tokenises them
(``conventions.TokenConventions.pair``: the context with the tokenizer's special tokens, T5's
ending in ``</s>``, BART's ``<s> ... </s>``; the continuation encoded apart, without them), and
training collates them in the decoder-only layout (``scoring.collate_queries``). So that training
and prediction share one path and one truncation rule, the context and continuation of each row
are read back from that layout here. The encoder reads the context as encoded; the decoder scores
the continuation followed by the EOS, which its log-likelihood includes (ending the answer there,
the convention of T0's and catwalk's rank classification: our one difference from lm-eval, whose
continuation has no EOS). Each is cut to the window as lm-evaluation-harness's seq2seq scoring cuts
them: the context to its last ``window`` tokens (``scoring.model_input``), and a continuation that
does not fit with its EOS is an error.
"""

from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple

import torch

from .output_layer import masked_logprob_sums

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def _right_padded(rows: Sequence[Sequence[int]], device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)  # padding is masked: any id will do
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


def seq2seq_logliks(
    lm: "PreTrainedModel", contexts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]
) -> torch.Tensor:
    """Summed log-likelihood of ``continuations[i]`` + EOS given ``contexts[i]``, shape
    ``[len(contexts)]``. Each distinct context goes through the encoder once."""
    device = next(lm.parameters()).device
    eos = [lm.config.eos_token_id] if lm.config.eos_token_id is not None else []
    distinct: Dict[Tuple[int, ...], int] = {}
    for context in contexts:
        distinct.setdefault(tuple(context), len(distinct))
    input_ids, attention_mask = _right_padded(list(distinct), device)
    encoded = lm.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    which = torch.tensor([distinct[tuple(c)] for c in contexts], device=device)

    targets, target_mask = _right_padded([list(c) + eos for c in continuations], device)
    start = torch.full((len(continuations), 1), lm.config.decoder_start_token_id, dtype=torch.long, device=device)
    logits = lm(
        encoder_outputs=(encoded[which],),
        attention_mask=attention_mask[which],
        decoder_input_ids=torch.cat([start, targets[:, :-1]], dim=1),
        decoder_attention_mask=torch.cat([torch.ones_like(start), target_mask[:, :-1]], dim=1),
        use_cache=False,
    ).logits
    return masked_logprob_sums(logits, targets, target_mask)


def seq2seq_batch_logliks(
    lm: "PreTrainedModel",
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    targets: torch.Tensor,
    target_mask: torch.Tensor,
) -> torch.Tensor:
    """:func:`seq2seq_logliks` of a batch in the decoder-only layout: each row's inputs are its
    (left-truncated) context followed by all but the last continuation token. The batch is read
    back to the host in one copy (not one per row: on a GPU each copy waits for the device)."""
    width, target_width = input_ids.shape[1], targets.shape[1]
    rows = torch.cat([input_ids, attention_mask.long(), targets, target_mask.long()], dim=1).tolist()
    contexts: List[List[int]] = []
    continuations: List[List[int]] = []
    for row in rows:
        ids, mask = row[:width], row[width:2 * width]
        target_ids, target_kept = row[2 * width:2 * width + target_width], row[2 * width + target_width:]
        inputs = [token for token, kept in zip(ids, mask) if kept]
        continuation = [token for token, kept in zip(target_ids, target_kept) if kept]
        contexts.append(inputs[: len(inputs) - (len(continuation) - 1)])
        continuations.append(continuation)
    return seq2seq_logliks(lm, contexts, continuations)
