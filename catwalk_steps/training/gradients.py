"""Gradient clipping, and the norm the trackers report: one call per optimizer step."""

from typing import List, Optional

import torch


def clip_gradients(parameters: List[torch.Tensor], max_norm: Optional[float], measure: bool) -> Optional[torch.Tensor]:
    """Clips the gradients to ``max_norm`` (if set) and returns their total norm before clipping
    (if clipped or ``measure``), as a tensor: nothing waits for it. Every worker calls it (under
    FSDP the norm is a collective)."""
    if max_norm is None and not measure:
        return None
    if max_norm is None:
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
    else:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    full_tensor = getattr(norm, "full_tensor", None)  # a DTensor under FSDP
    return full_tensor() if full_tensor is not None and measure else norm
