"""``packing: true``: training rows packed into sequences of the model's window, as TRL's
``packing`` (its default ``"bfd"`` strategy) packs them: best-fit decreasing, each row whole in
one sequence, position ids restarting at each row, and no attention across rows (a block-diagonal
causal mask: on CPU, SDPA ignores position ids, so the mask, not the positions, keeps rows apart;
:func:`catwalk_steps.models.answer_loss.packed_layout`).

A row's first token is never learnt in a pack, as it is not alone (nothing before it in its row
predicts it), so a pack's loss, gradients and learnt-token count are its rows'. ``batch_size``
then counts packed sequences, as TRL's does.
"""

import bisect
from typing import Any, Dict, List

Example = Dict[str, Any]


def packed_examples(examples: List[Example], max_length: int) -> List[Example]:
    """``examples`` (answer-loss examples: :func:`catwalk_steps.kinds.generation.answer_examples`) packed into
    sequences of at most ``max_length`` tokens, longest rows first, each into the fullest
    sequence it fits (best-fit decreasing)."""
    lengths = [len(example["prompt"]) + len(example["answer"]) for example in examples]
    packs: List[List[int]] = []
    rooms: List[tuple] = []  # (room left, pack number), sorted: the fullest pack that fits is found by bisection
    for number in sorted(range(len(examples)), key=lambda n: (-lengths[n], n)):
        found = bisect.bisect_left(rooms, (lengths[number], -1))
        if found == len(rooms):
            packs.append([number])
            bisect.insort(rooms, (max_length - lengths[number], len(packs) - 1))
            continue
        room, pack = rooms.pop(found)
        packs[pack].append(number)
        bisect.insort(rooms, (room - lengths[number], pack))
    return [pack_of([examples[n] for n in pack]) for pack in packs]


def pack_of(rows: List[Example]) -> Example:
    """One packed sequence of ``rows``: their tokens one after another, their learnt masks (each
    row's first token not learnt), and ``segments``, each row's length."""
    ids: List[int] = []
    mask: List[bool] = []
    for row in rows:
        learnt = row.get("mask") or [True] * len(row["answer"])
        row_mask = [False] * len(row["prompt"]) + list(learnt)
        row_mask[0] = False
        ids += list(row["prompt"]) + list(row["answer"])
        mask += row_mask
    first = mask.index(True)
    return {"prompt": ids[:first], "answer": ids[first:], "mask": mask[first:], "tokens": sum(mask),
            "segments": [len(row["prompt"]) + len(row["answer"]) for row in rows], "instance": None, "task": None}
