"""Log-likelihood of continuations given contexts: the one computation that training and
prediction share.

Queries are encoded by :mod:`.conventions` (lm-evaluation-harness's special tokens, pairs
encoded whole and split); over-long inputs are cut from the left, as lm-evaluation-harness cuts
them.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from tango.common.exceptions import ConfigurationError

from .seq2seq import seq2seq_batch_logliks
from .output_layer import hidden_states, masked_logprob_sums, output_layer, scored_positions, target_logprob_sums
from .forward_signature import accepts_logits_to_keep
from .shared_context import can_share_contexts, collate_shared, shared_context_logliks
from .transfer import on_device

if TYPE_CHECKING:  # imported where models are loaded
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class Query:
    """One (context, continuation) pair as token ids."""

    context: Tuple[int, ...]
    continuation: Tuple[int, ...]


def model_input(query: Query, max_length: int, encoder_decoder: bool = False) -> Tuple[List[int], List[int]]:
    """The token ids fed to the model (left-truncated to ``max_length``) and the targets scored.

    An encoder-decoder's encoder reads the context and its decoder the continuation followed by
    the EOS :mod:`.seq2seq` appends, each within the window: the context keeps its last
    ``max_length`` tokens, as lm-evaluation-harness's seq2seq ``context_enc[-max_length:]`` keeps
    them. The row is still laid out as a decoder-only one (context, then the continuation less its
    last token), which :mod:`.seq2seq` reads back."""
    room = max_length - 1 if encoder_decoder else max_length  # the continuation's
    if len(query.continuation) > room:
        raise ConfigurationError(
            f"A continuation of {len(query.continuation)} tokens does not fit the model's "
            f"context window of {max_length} tokens" + (" with its EOS" if encoder_decoder else "")
        )
    if encoder_decoder:
        tokens = query.context[-max_length:] + query.continuation
    else:
        tokens = (query.context + query.continuation)[-(max_length + 1):]
    return list(tokens[:-1]), list(query.continuation)


def collate_queries(
    queries: Sequence[Query], pad_token_id: int, max_length: int, encoder_decoder: bool = False,
    masks: Optional[Sequence[Sequence[bool]]] = None,
) -> Dict[str, torch.Tensor]:
    """Left-padded inputs with explicit position ids, and right-aligned targets (each query cut
    by :func:`model_input`); ``masks``, where given, say which of each continuation's tokens are
    targets (a chat row's learnt turns), else all are.

    Left padding puts every continuation at the end of its row, so the model only has to produce
    logits for the last ``targets.shape[1]`` positions.
    """
    pairs = [model_input(query, max_length, encoder_decoder) for query in queries]
    width = max(len(inputs) for inputs, _ in pairs)
    target_width = max(len(targets) for _, targets in pairs)
    input_ids = torch.full((len(pairs), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(pairs), width), dtype=torch.long)
    targets = torch.zeros((len(pairs), target_width), dtype=torch.long)
    target_mask = torch.zeros((len(pairs), target_width), dtype=torch.bool)
    for row, (inputs, continuation) in enumerate(pairs):
        input_ids[row, width - len(inputs):] = torch.tensor(inputs)
        attention_mask[row, width - len(inputs):] = 1
        targets[row, target_width - len(continuation):] = torch.tensor(continuation)
        target_mask[row, target_width - len(continuation):] = torch.tensor(masks[row]) if masks else True
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    spans = [(target_width - len(scored), target_width) for _, scored in pairs]
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "targets": targets,
        "target_mask": target_mask,
        "scored": target_mask.nonzero().T.contiguous() if masks else scored_positions(spans),
    }


def continuation_logliks(
    lm: "PreTrainedModel",
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    targets: torch.Tensor,
    target_mask: torch.Tensor,
    scored: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Summed log-likelihood of each row's targets, shape ``[batch]``.

    Only the target positions (``scored``: ``target_mask``'s
    :func:`~.output_layer.scored_positions`, as collated) get logits, and the target logit is
    gathered before normalising (``logit - logsumexp``), so no ``[batch, length, vocab]``
    log-softmax is ever materialised. Encoder-decoder models read the same batch their own way
    (:mod:`.seq2seq`).
    """
    if lm.config.is_encoder_decoder:
        return seq2seq_batch_logliks(lm, input_ids, attention_mask, targets, target_mask)
    width = targets.shape[1]
    if output_layer(lm) is not None:  # logits at real targets only, not at the padding
        hidden = hidden_states(lm, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        return target_logprob_sums(lm, hidden[:, -width:], targets, target_mask, scored)
    return masked_logprob_sums(last_logits(lm, input_ids, attention_mask, position_ids, width), targets, target_mask)


def last_logits(
    lm: "PreTrainedModel", input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, width: int
) -> torch.Tensor:
    """The logits of a causal LM's last ``width`` positions, ``[batch, width, vocabulary]``."""
    kwargs = {"logits_to_keep": width} if accepts_logits_to_keep(lm) else {}
    return lm(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, **kwargs
    ).logits[:, -width:]


def greedy_continuation_logliks(
    lm: "PreTrainedModel", input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
    targets: torch.Tensor, target_mask: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`continuation_logliks` of a causal LM, and whether each row's targets are, token for
    token, the most likely tokens (lm-evaluation-harness's ``is_greedy``: greedy decoding would
    produce the continuation). Targets are short (a word), so their logits are small."""
    logits = last_logits(lm, input_ids, attention_mask, position_ids, targets.shape[1])
    mask = target_mask.bool()
    greedy = ((logits.argmax(-1) == targets) | ~mask).all(-1)
    return masked_logprob_sums(logits, targets, mask), greedy


def budget_batches(
    lengths: Sequence[int], max_batch_size: int, max_batch_tokens: int, *,
    contexts: Optional[Sequence[int]] = None, rows_each: int = 1, max_width: Optional[int] = None,
) -> Iterator[List[int]]:
    """Indices grouped into batches, longest first, each within ``max_batch_size`` rows and
    ``max_batch_tokens`` padded tokens, and none padding an item to more than twice its length
    (long-tailed lengths, such as PIQA's answers, would otherwise make most of a batch padding).
    Longest first makes an out-of-memory show at once.

    For choices sharing a context (:mod:`.shared_context`), an item is a group of ``rows_each``
    continuations, the longest of ``lengths[i]`` tokens, after a context of ``contexts[i]``: a
    batch pads its contexts to the longest and its continuations to the longest, and each
    continuation holds a copy of its context's key/value cache, so a batch holds
    ``rows x (longest context + longest continuation)`` positions. (Counting a context once per
    group would let long contexts with many choices hold several times the budget.) Nor may that
    width exceed ``max_width``: a long context with short choices and a short context with long
    choices each fit a model's window, but padded together they need not (GPT-Neo's attention
    mask is a buffer the window's size)."""
    contexts = contexts if contexts is not None else [0] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda i: -(contexts[i] + lengths[i]))
    batch: List[int] = []
    longest_context = longest = 0
    for index in order:
        if batch:
            rows = (len(batch) + 1) * rows_each
            width = max(longest_context, contexts[index]) + max(longest, lengths[index])
            full = rows > max_batch_size or rows * width > max_batch_tokens
            full = full or (max_width is not None and width > max_width)
            if full or 2 * (contexts[index] + lengths[index]) < contexts[batch[0]] + lengths[batch[0]]:
                yield batch
                batch, longest_context, longest = [], 0, 0
        batch.append(index)
        longest_context, longest = max(longest_context, contexts[index]), max(longest, lengths[index])
    if batch:
        yield batch


def group_parts(
    members: List[int], lengths: Sequence[int], context: int, max_batch_size: int, max_batch_tokens: int
) -> List[List[int]]:
    """``members`` (queries sharing a context of ``context`` tokens, continuations of ``lengths``)
    split into parts of at most ``max_batch_size`` queries that fit ``max_batch_tokens``, each
    continuation holding a copy of the context's cache (:func:`budget_batches`): every document's
    first rolling window shares the one prefix token, and a group of long windows would otherwise
    be one forward pass many windows wide. A group that fits stays whole and in order."""
    if len(members) <= max_batch_size and len(members) * (context + max(lengths)) <= max_batch_tokens:
        return [members]
    parts = budget_batches(lengths, max_batch_size, max_batch_tokens, contexts=[context] * len(lengths))
    return [[members[k] for k in part] for part in parts]


@torch.inference_mode()
def score_queries(
    lm: "PreTrainedModel",
    queries: Sequence[Query],
    *,
    pad_token_id: int,
    max_length: int,
    max_batch_size: int,
    max_batch_tokens: int,
    progress=None,
    known: Optional[Dict[int, float]] = None,
    on_batch: Optional[Callable[[List[Tuple[int, Any]]], None]] = None,
    greedy: bool = False,
) -> List[Any]:
    """Summed log-likelihood of every query's continuation, in the order given; with ``greedy``,
    ``[loglik, is_greedy]`` pairs (:func:`greedy_continuation_logliks`), every query in the plain
    left-padded batches.

    Queries that share a context (the choices of one instance) are scored against a single
    encoding of it (:mod:`.shared_context`); the others, and any that must be truncated, in
    left-padded batches. Batches are packed longest first within ``max_batch_size`` queries and
    ``max_batch_tokens`` padded tokens. Queries whose index is in ``known`` are not scored again.
    ``on_batch`` receives each scored batch's ``(index, loglik)`` pairs, and ``progress`` (a
    tqdm bar) advances by its size.
    """
    device = next(lm.parameters()).device
    logliks = dict(known or {})
    groups: Dict[Tuple[int, ...], List[int]] = {}
    for i in range(len(queries)):
        if i not in logliks:
            groups.setdefault(queries[i].context, []).append(i)
    fits = can_share_contexts(lm) and not greedy
    selects = output_layer(lm) is not None  # the output layer runs at the scored positions only

    def shareable(members: List[int]) -> bool:
        return fits and len(members) > 1 and all(
            len(queries[i].context) + len(queries[i].continuation) <= max_length + 1 for i in members
        )

    shared = [
        part
        for members in groups.values() if shareable(members)
        for part in group_parts(
            members, [len(queries[i].continuation) for i in members], len(queries[members[0]].context),
            max_batch_size, max_batch_tokens,
        )
    ]
    single = [i for members in groups.values() if not shareable(members) for i in members]

    def record(scored: List[Tuple[int, Any]]) -> None:
        logliks.update(scored)
        if on_batch is not None:
            on_batch(scored)
        if progress is not None:
            progress.update(len(scored))

    with OneBatchLate(record) as results:  # read on an interruption too: nothing computed is lost
        # Batch sizes count queries, so groups are batched with groups of their own size: one
        # group of 32 continuations sharing "Answer:" must not cut every batch of 2-choice
        # instances down to one instance.
        by_size: Dict[int, List[List[int]]] = {}
        for members in shared:
            by_size.setdefault(len(members), []).append(members)
        for size, alike in sorted(by_size.items(), reverse=True):
            longest = [max(len(queries[i].continuation) for i in m) for m in alike]
            contexts = [len(queries[m[0]].context) for m in alike]
            # A context and its continuation, less the last token, fill at most the window (shareable).
            for batch in budget_batches(longest, max_batch_size, max_batch_tokens, contexts=contexts, rows_each=size,
                                        max_width=max_length + 1):
                members = [alike[g] for g in batch]
                tensors = collate_shared(
                    [queries[m[0]].context for m in members],
                    [[queries[i].continuation for i in m] for m in members],
                    pad_token_id,
                )
                if not selects:
                    tensors.pop("scored")
                values = shared_context_logliks(lm, **on_device(tensors, device))
                results.add([i for m in members for i in m], values)

        encoder_decoder = lm.config.is_encoder_decoder
        lengths = [len(model_input(queries[i], max_length, encoder_decoder)[0]) for i in single]
        for batch in budget_batches(lengths, max_batch_size, max_batch_tokens):
            indices = [single[i] for i in batch]
            tensors = collate_queries([queries[i] for i in indices], pad_token_id, max_length, encoder_decoder)
            if greedy or not selects:  # logits at every target position: none to select
                tensors.pop("scored")
            tensors = on_device(tensors, device)
            if greedy:  # [loglik, is_greedy] pairs, read back in one copy (float32 holds 0 and 1 exactly)
                sums, hits = greedy_continuation_logliks(lm, **tensors)
                pairs = torch.stack([sums, hits.to(sums.dtype)], dim=-1)
                results.add(indices, pairs, lambda pair: [pair[0], pair[1] == 1])
            else:
                results.add(indices, continuation_logliks(lm, **tensors))
    return [logliks[i] for i in range(len(queries))]


class OneBatchLate:
    """Reads each batch's results back one batch late. A read waits for the device to finish
    the batch: read at once, the device would idle while the host collates, copies and queues
    the next one. Read once the next batch is queued, the device computes it meanwhile. (On CPU,
    where each operation is done before the next starts, it changes nothing.) ``record``
    receives each batch's ``(index, value)`` pairs in order; leaving the ``with`` block reads
    the last, on an exception too (an interruption keeps every batch computed).

    On a GPU a plain read (``tolist``) would wait for everything queued on the stream, the next
    batch included: each batch's results are copied to pinned host memory as it is queued, and
    the read waits only for that copy's event."""

    def __init__(self, record: Callable[[List[Tuple[int, Any]]], None]) -> None:
        self.record = record
        self.waiting: Optional[Tuple[List[int], torch.Tensor, Optional[Any], Callable[[Any], Any]]] = None

    def add(self, indices: List[int], values: torch.Tensor, convert: Callable[[Any], Any] = lambda v: v) -> None:
        """A batch just queued: ``values`` (on the device), one per index, each read through ``convert``."""
        copied = None
        if values.is_cuda:
            host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            host.copy_(values, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(torch.cuda.current_stream(values.device))
            values = host
        self.flush()
        self.waiting = (indices, values, copied, convert)

    def __enter__(self) -> "OneBatchLate":
        return self

    def __exit__(self, *exception) -> None:
        self.flush()

    def flush(self) -> None:
        if self.waiting is not None:
            indices, values, copied, convert = self.waiting
            self.waiting = None
            if copied is not None:
                copied.synchronize()
            self.record([(i, convert(value)) for i, value in zip(indices, values.tolist())])
