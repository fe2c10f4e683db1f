"""The training row of generative fine-tuning: one sequence, its prompt read and its answer
learnt (where its mask says), built by :func:`answer_row` and nowhere else, so every row is cut
to the model's window the same way whatever made it (a prompt and its reference answer, or a
chat row as TRL makes it)."""

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple


@dataclass(frozen=True)
class AnswerRow:
    """``prompt`` tokens, then ``answer`` tokens, the answer's learnt ones marked by ``mask``
    (``None``: all); ``learnt``: how many tokens the loss sums over (an encoder-decoder's
    decoder also learns the EOS its scoring appends); ``instance`` and ``task`` (its position in
    the step's tasks) for validation by a task's metric."""

    prompt: Tuple[int, ...]
    answer: Tuple[int, ...]
    mask: Optional[Tuple[bool, ...]]
    learnt: int
    instance: Any = None
    task: int = 0

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.answer)

    @property
    def segments(self) -> Tuple[int, ...]:
        """The lengths of the sequences the row holds: itself (a :class:`~.packing.Pack` holds several)."""
        return (self.length,)

    def answer_mask(self) -> Tuple[bool, ...]:
        return self.mask if self.mask is not None else (True,) * len(self.answer)


def answer_row(ids: Sequence[int], learnt: Sequence[bool], max_length: int, keep_start: bool,
               instance: Any = None, task: int = 0) -> Optional[AnswerRow]:
    """A causal LM's row of tokens ``ids`` whose loss learns where ``learnt`` is true, cut to the
    model's window of ``max_length`` tokens: keeping its start (``keep_start``, TRL's
    ``truncation_mode="keep_start"`` for chat rows) or its end (a prompt cut from the left, as
    lm-evaluation-harness cuts prompts). The tokens before the first learnt one (never the
    first token: nothing predicts it) are the prompt. ``None`` where nothing learnt is left."""
    cut = slice(None, max_length) if keep_start else slice(-max_length, None)
    ids, learnt = tuple(ids[cut]), tuple(learnt[cut])
    first = next((k for k, bit in enumerate(learnt) if bit and k > 0), None)
    if first is None:
        return None
    mask = learnt[first:]
    return AnswerRow(ids[:first], ids[first:], None if all(mask) else mask, sum(mask), instance, task)


def encoder_decoder_row(prompt: Sequence[int], answer: Sequence[int], max_length: int,
                        instance: Any = None, task: int = 0) -> AnswerRow:
    """An encoder-decoder's row: the encoder reads the prompt's last ``max_length`` tokens (as
    :func:`.scoring.model_input` cuts it), the decoder learns the answer and the EOS its scoring
    appends (the caller checks that they fit the window)."""
    return AnswerRow(tuple(prompt[-max_length:]), tuple(answer), None, len(answer) + 1, instance, task)
