"""Left padding: every row of a batch ends at the same position, so the next token of each is
predicted at the last one (shared contexts, generation)."""

from typing import Sequence, Tuple

import torch


def left_padded(rows: Sequence[Sequence[int]], pad_token_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``[rows, longest]`` token ids padded on the left with ``pad_token_id``, and the attention
    mask (1 at real tokens)."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row):] = 1
    return ids, mask
