"""``packing: true``: answer rows (:mod:`.answer_rows`) packed into sequences of the model's
window, as TRL's ``packing`` (its default ``"bfd"`` strategy) packs them: best-fit decreasing,
each row whole in one sequence (rows are already cut to the window where they are built), position
ids restarting at each row, and no attention across rows (a block-diagonal causal mask: on CPU,
SDPA ignores position ids, so the mask, not the positions, keeps rows apart: :func:`packed_layout`).

A row's first token is never learnt in a pack, as it is not alone (nothing before it in its row
predicts it), so a pack's loss, gradients and learnt-token count are its rows'. ``batch_size``
then counts packs, as TRL's counts packed sequences.
"""

import bisect
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List, Sequence, Tuple

import torch

from .answer_rows import AnswerRow


@dataclass(frozen=True)
class Pack:
    """Answer rows trained as one sequence. It reads as a row (``prompt``, ``answer``,
    :meth:`answer_mask`, ``learnt``) whose ``segments`` are its rows' lengths."""

    rows: Tuple[AnswerRow, ...]

    @cached_property
    def _tokens(self) -> Tuple[Tuple[int, ...], Tuple[bool, ...]]:
        ids: Tuple[int, ...] = ()
        learnt: Tuple[bool, ...] = ()
        for row in self.rows:
            ids += row.prompt + row.answer
            learnt += (False,) + ((False,) * len(row.prompt) + row.answer_mask())[1:]
        return ids, learnt

    @cached_property
    def _first(self) -> int:
        """Where the answer starts: at the first learnt token (never the first token)."""
        return next((k for k, bit in enumerate(self._tokens[1]) if bit), 1)

    @property
    def prompt(self) -> Tuple[int, ...]:
        return self._tokens[0][:self._first]

    @property
    def answer(self) -> Tuple[int, ...]:
        return self._tokens[0][self._first:]

    def answer_mask(self) -> Tuple[bool, ...]:
        return self._tokens[1][self._first:]

    @property
    def learnt(self) -> int:
        return sum(self._tokens[1])

    @property
    def length(self) -> int:
        return sum(self.segments)

    @property
    def segments(self) -> Tuple[int, ...]:
        return tuple(row.length for row in self.rows)


def packed(rows: Sequence[AnswerRow], max_length: int) -> List[Pack]:
    """``rows`` packed into sequences of at most ``max_length`` tokens, longest rows first, each
    into the fullest sequence it fits (best-fit decreasing)."""
    too_long = next((row for row in rows if row.length > max_length), None)
    if too_long is not None:  # rows are cut where they are built (:mod:`.answer_rows`)
        raise ValueError(f"A row of {too_long.length} tokens is longer than the window of {max_length}")
    packs: List[List[int]] = []
    rooms: List[Tuple[int, int]] = []  # (room left, pack number), sorted: the fullest pack that fits is found by bisection
    for number in sorted(range(len(rows)), key=lambda n: (-rows[n].length, n)):
        found = bisect.bisect_left(rooms, (rows[number].length, -1))
        if found == len(rooms):
            packs.append([number])
            bisect.insort(rooms, (max_length - rows[number].length, len(packs) - 1))
            continue
        room, pack = rooms.pop(found)
        packs[pack].append(number)
        bisect.insort(rooms, (room - rows[number].length, pack))
    return [Pack(tuple(rows[n] for n in pack)) for pack in packs]


def packed_layout(segments: List[Sequence[int]], width: int) -> Dict[str, torch.Tensor]:
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
