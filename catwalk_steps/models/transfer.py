"""Batches from the host to a device without making the host wait.

A copy from pageable host memory to a GPU blocks the host until it is done. From pinned memory
with ``non_blocking`` it is queued on the stream like a kernel, and the host goes on (collating
and queueing the next batch) while the device works; the pinned buffer is not reused before the
copy has run (torch's caching host allocator records it). On CPU there is nothing to copy.
"""

from typing import Dict

import torch


def on_device(tensors: Dict[str, torch.Tensor], device: torch.device) -> Dict[str, torch.Tensor]:
    """``tensors`` on ``device``: to a GPU through pinned memory, without blocking the host."""
    if device.type != "cuda":
        return {name: tensor.to(device) for name, tensor in tensors.items()}
    return {name: tensor.pin_memory().to(device, non_blocking=True) for name, tensor in tensors.items()}
