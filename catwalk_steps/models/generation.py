"""Greedy generation: each prompt continued by the most likely token, one at a time, until EOS,
a stop string or the token budget.

The conventions are lm-evaluation-harness's ``generate_until`` (HFLM), so that generations are
comparable: the prompt is encoded as :mod:`.conventions` says (with the tokenizer's special
tokens, as lm-eval 0.4.13 at its defaults), cut from the left to fit
``max_length - max_new_tokens`` (an encoder-decoder's encoder: ``max_length``), the stop strings
are the task's and the tokenizer's EOS, watched for with special tokens kept, and the
continuation is decoded without special tokens and cut at the first stop string. A row of lm-eval's
batch goes on generating after its stop string until the whole batch has stopped, and a special
token left out of its text no longer cuts it there: its text then depends on its batch, and we
match its batches of one. The work is arranged for speed: prompts sorted by length (longest
first, so an out-of-memory shows at once), batched left-padded within ``max_batch_size`` rows
and ``max_batch_tokens`` tokens of prompt and new tokens, a key/value cache (written in place:
:mod:`.reserved_cache`) so that each step runs one token per sequence, the next token the
argmax of the logits (greedy needs no softmax), and a sequence that has finished dropped from the
batch (and from the cache).

Each generation also records its ``margin``: the smallest gap, over its decisions, between the
top two logits. Batching changes logits by float rounding alone, so a generation can change
with the batch size only where its margin is of that order.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import torch

from .forward_signature import accepts_logits_to_keep, cache_keyword
from .padding import left_padded

if TYPE_CHECKING:  # imported where models are loaded
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from .conventions import TokenConventions


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt as token ids (before any cut), its stop strings and its token budget."""

    prompt: Tuple[int, ...]
    until: Tuple[str, ...]
    max_new_tokens: int
    encoder_decoder: bool = False

    def room(self, max_length: int) -> int:
        """How many prompt tokens fit: a decoder-only model's ``max_length`` holds the prompt and
        the generated tokens; an encoder-decoder's encoder reads ``max_length`` tokens of its own
        (lm-evaluation-harness's seq2seq ``generate_until`` cuts the tokenizer's encoding, special
        tokens included, to ``max_length``)."""
        return max_length if self.encoder_decoder else max_length - self.max_new_tokens

    def window(self, max_length: int) -> Tuple[int, ...]:
        """The prompt cut from the left to :meth:`room`."""
        room = self.room(max_length)
        if room < 1:
            raise ValueError(
                f"max_new_tokens={self.max_new_tokens} leaves no room for a prompt in a context window of {max_length}"
            )
        return self.prompt[-room:]


def cut_at_stop(text: str, until: Iterable[str]) -> Tuple[str, bool]:
    """``text`` up to the first occurrence of any stop string, and whether one occurred."""
    cut = min((text.find(stop) for stop in until if stop in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _choices_and_gaps(logits: torch.Tensor) -> Tuple[torch.Tensor, List[int], List[float]]:
    """Each row's argmax, on the device (the next inputs) and read back with the gap between its
    top two logits in one copy (on a GPU each read waits for the device). float64 holds token ids
    and float32 gaps exactly."""
    chosen = logits.argmax(-1)
    if logits.shape[-1] < 2:
        return chosen, [0] * logits.shape[0], [float("inf")] * logits.shape[0]
    top = logits.topk(2, dim=-1).values
    read, gaps = torch.stack([chosen.double(), (top[:, 0] - top[:, 1]).double()]).tolist()
    return chosen, [int(token) for token in read], gaps


class _Sequences:
    """The sequences of one batch as they grow: which are still running, their tokens, their
    margins and their final texts."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", requests: Sequence[GenerationRequest], stops: Set[int],
                 until: Sequence[Tuple[str, ...]]):
        self.tokenizer, self.requests, self.stops, self.until = tokenizer, requests, stops, until
        self.running = list(range(len(requests)))
        self.tokens: List[List[int]] = [[] for _ in requests]
        self.margins = [float("inf")] * len(requests)
        self.texts: Dict[int, str] = {}
        # A stop string of b bytes lies within the last b + 1 tokens; 2 more spare a decoder's
        # treatment of a text's first token (a dropped leading space).
        self.lookback = [2 + max((len(s.encode()) for s in stops_of_row), default=0) for stops_of_row in until]

    @property
    def longest_budget(self) -> int:
        """The most new tokens any sequence of the batch may take: how long its cache can grow."""
        return max(request.max_new_tokens for request in self.requests)

    def _finish(self, row: int) -> None:
        text = self.tokenizer.decode(self.tokens[row], skip_special_tokens=True)
        self.texts[row] = cut_at_stop(text, self.until[row])[0]

    def advance(self, logits: torch.Tensor) -> Tuple[List[int], torch.Tensor]:
        """Takes each running sequence's next token from its ``logits`` row; returns the
        positions (in the running list) of those that go on, and every row's token on the
        device (the next inputs, once the finished rows are dropped: no copy back to it)."""
        on_device, chosen, gaps = _choices_and_gaps(logits.float())
        going = []
        for position, (row, token, gap) in enumerate(zip(self.running, chosen, gaps)):
            self.margins[row] = min(self.margins[row], gap)
            request = self.requests[row]
            if token in self.stops:
                self._finish(row)
                continue
            self.tokens[row].append(token)
            if len(self.tokens[row]) >= request.max_new_tokens or self._stopped(row):
                self._finish(row)
                continue
            going.append(position)
        self.running = [self.running[p] for p in going]
        return going, on_device

    def _stopped(self, row: int) -> bool:
        """Whether a stop string has been generated, special tokens kept (lm-evaluation-harness's
        stopping criterion decodes them), so that a stop string such as ``"<|im_end|>"`` stops
        there. The text returned is decoded without them and cut at the stop strings, as lm-eval's."""
        until = self.until[row]
        if not until:
            return False
        tail = self.tokenizer.decode(self.tokens[row][-self.lookback[row]:], skip_special_tokens=False)
        if not any(stop in tail for stop in until):
            return False
        return cut_at_stop(self.tokenizer.decode(self.tokens[row], skip_special_tokens=False), until)[1]


def _causal_batch(
    lm: "PreTrainedModel", sequences: _Sequences, prompts: Sequence[Tuple[int, ...]], pad_token_id: int
) -> None:
    """Greedy generation for one batch of a decoder-only model: the left-padded prompts once,
    then one token per running sequence per step, extending the cache."""
    from .reserved_cache import ReservedCache

    device = next(lm.parameters()).device
    input_ids, mask = (tensor.to(device) for tensor in left_padded(prompts, pad_token_id))
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    next_position = mask.sum(-1)
    cache = ReservedCache(input_ids.shape[1] + sequences.longest_budget)
    trim = {"logits_to_keep": 1} if accepts_logits_to_keep(lm) else {}
    cache_argument = cache_keyword(lm)
    while True:
        out = lm(
            input_ids=input_ids, attention_mask=mask, position_ids=positions,
            **{cache_argument: cache}, use_cache=True, **trim,
        )
        going, chosen = sequences.advance(out.logits[:, -1])
        if not going:
            return
        if len(going) < mask.shape[0]:  # finished sequences leave the batch and the cache
            kept = torch.tensor(going, device=device)
            cache.batch_select_indices(kept)
            mask, next_position, chosen = mask[kept], next_position[kept], chosen[kept]
        input_ids = chosen[:, None]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = next_position[:, None]
        next_position = next_position + 1


def _seq2seq_batch(lm: "PreTrainedModel", sequences: _Sequences, prompts: Sequence[Tuple[int, ...]]) -> None:
    """Greedy generation for one batch of an encoder-decoder model: the prompts (encoded with the
    tokenizer's special tokens, as :mod:`.seq2seq` scores contexts) through the encoder once, then
    the decoder one token per running sequence per step from the decoder start token."""
    from transformers import DynamicCache, EncoderDecoderCache

    from .reserved_cache import ReservedCache

    device = next(lm.parameters()).device
    rows = [list(p) for p in prompts]
    width = max(len(r) for r in rows)
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)  # padding is masked: any id will do
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    encoded = lm.get_encoder()(input_ids=input_ids, attention_mask=mask).last_hidden_state
    decoder_input = torch.full((len(rows), 1), lm.config.decoder_start_token_id, dtype=torch.long, device=device)
    cache = EncoderDecoderCache(ReservedCache(1 + sequences.longest_budget), DynamicCache())
    cache_argument = cache_keyword(lm)
    while True:
        out = lm(
            encoder_outputs=(encoded,), attention_mask=mask, decoder_input_ids=decoder_input,
            **{cache_argument: cache}, use_cache=True,
        )
        going, chosen = sequences.advance(out.logits[:, -1])
        if not going:
            return
        if len(going) < encoded.shape[0]:
            kept = torch.tensor(going, device=device)
            cache.batch_select_indices(kept)
            encoded, mask, chosen = encoded[kept], mask[kept], chosen[kept]
        decoder_input = chosen[:, None]


def generation_batches(
    lengths: Sequence[int], budgets: Sequence[int], max_batch_size: int, max_batch_tokens: Optional[int],
    max_width: Optional[int] = None,
) -> Iterator[List[int]]:
    """Positions of prompts of ``lengths`` tokens (longest first) with ``budgets`` new tokens each,
    in consecutive batches of at most ``max_batch_size`` rows whose padded rows (the longest prompt
    and the largest budget, what the key/value cache grows to) fit ``max_batch_tokens`` and are at
    most ``max_width`` long (each prompt fits the window with its own budget, but a long prompt
    with a short budget beside a short prompt with a long one need not: GPT-Neo's attention mask
    is a buffer the window's size); one row over the budget is a batch of its own."""
    batch: List[int] = []
    for k in range(len(lengths)):
        rows = batch + [k]
        width = max(lengths[b] for b in rows) + max(budgets[b] for b in rows)
        over = max_batch_tokens is not None and len(rows) * width > max_batch_tokens
        over = over or (max_width is not None and width > max_width)
        if batch and (len(batch) == max_batch_size or over):
            yield batch
            batch = []
        batch.append(k)
    if batch:
        yield batch


@torch.inference_mode()
def generate_greedy(
    lm: "PreTrainedModel",
    conventions: "TokenConventions",
    requests: Sequence[GenerationRequest],
    *,
    pad_token_id: int,
    max_length: int,
    max_batch_size: int,
    max_batch_tokens: Optional[int] = None,
    progress=None,
    known: Optional[Dict[int, Dict[str, float]]] = None,
    on_batch: Optional[Callable[[List[Tuple[int, Dict[str, object]]]], None]] = None,
) -> List[Dict[str, object]]:
    """Each request's generation, ``{"text": ..., "margin": ...}``, in the order given.

    Batches hold at most ``max_batch_size`` prompts and, where given, ``max_batch_tokens`` tokens
    of padded prompt and new tokens (:func:`generation_batches`); training's validation bounds
    them by rows alone, as its batches are.

    Requests whose index is in ``known`` are not generated again. ``on_batch`` receives each
    batch's ``(index, generation)`` pairs, and ``progress`` (a tqdm bar) advances by its size.
    """
    if cache_keyword(lm) is None:
        raise TypeError(f"{type(lm).__name__}.forward takes no key/value cache: it cannot generate here")
    results: Dict[int, Dict[str, object]] = dict(known or {})
    windows = {i: requests[i].window(max_length) for i in range(len(requests)) if i not in results}
    order = sorted(windows, key=lambda i: (-len(windows[i]), i))
    tokenizer, stops = conventions.tokenizer, conventions.stop_token_ids(lm)
    lengths, budgets = [len(windows[i]) for i in order], [requests[i].max_new_tokens for i in order]
    # A decoder-only batch's cache holds its prompts and new tokens; T5's encoder and decoder do not share one.
    width = None if lm.config.is_encoder_decoder else max_length
    for positions in generation_batches(lengths, budgets, max_batch_size, max_batch_tokens, width):
        batch = [order[k] for k in positions]
        sequences = _Sequences(tokenizer, [requests[i] for i in batch], stops,
                               [conventions.stop_strings(requests[i].until) for i in batch])
        prompts = [windows[i] for i in batch]
        if lm.config.is_encoder_decoder:
            _seq2seq_batch(lm, sequences, prompts)
        else:
            _causal_batch(lm, sequences, prompts, pad_token_id)
        generated = [(i, {"text": sequences.texts[k], "margin": sequences.margins[k]}) for k, i in enumerate(batch)]
        results.update(generated)
        if on_batch is not None:
            on_batch(generated)
        if progress is not None:
            progress.update(len(batch))
    return [results[i] for i in range(len(requests))]
