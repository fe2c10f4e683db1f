"""Batches from the host to a device without making the host wait.

A copy from pageable host memory to a GPU blocks the host until it is done. From pinned memory
with ``non_blocking`` it is queued on the stream like a kernel, and the host goes on (collating
and queueing the next batch) while the device works; the pinned buffer is not reused before the
copy has run (torch's caching host allocator records it). On CPU there is nothing to copy.
"""

from typing import Any, Dict

import torch


def on_device(batch: Dict[str, Any], device: torch.device) -> Dict[str, Any]:
    """``batch``'s tensors on ``device`` (to a GPU through pinned memory, without blocking the
    host); its other values, such as counts the host knows, as they are."""
    def moved(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if device.type != "cuda":
            return value.to(device)
        return value.pin_memory().to(device, non_blocking=True)

    return {name: moved(value) for name, value in batch.items()}
