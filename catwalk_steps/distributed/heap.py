"""Giving the heap's freed pages back to the operating system during training (glibc only).

glibc returns memory on its own only from the top of its heap, and the blocks it maps apart (from
the mmap threshold that :mod:`.launch` fixes, 4 MiB, up). A training step frees many smaller
blocks (activations and their gradients, the optimizer's temporaries) below blocks that stay (a
sharded worker's smaller gradient shards, made block by block in the backward pass), so their
pages stay resident: under FSDP at a GPT-2-medium shape, 0.30 GiB of a worker's peak at the end of
the backward pass, 8 MiB more per transformer block (docs/benchmarks.md). ``malloc_trim`` walks
every arena and releases the whole free pages inside it; glibc's bookkeeping stays as it is, and
a page used again is faulted back in. It touches no tensor, so no computed number changes.
"""

import ctypes
from typing import Any, Callable, Optional

import torch
from torch.distributed.fsdp import FSDPModule


def _malloc_trim() -> Optional[Callable[[int], int]]:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return None


_TRIM = _malloc_trim()


def release_freed_heap(*_: Any) -> None:
    """Returns the heap's free pages to the operating system, where glibc allows it; elsewhere
    nothing. Costs a walk over the heap's free blocks (milliseconds for a few GiB). Takes and
    ignores any arguments, to serve as a hook."""
    if _TRIM is not None:
        _TRIM(0)


def release_freed_heap_while_training(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Trims the heap as each of ``model``'s FSDP-sharded modules starts its backward pass (when
    its output's gradient arrives), so that what the modules after it freed does not add up to the
    peak at the end of the pass, and after every optimizer step. A trim after the step alone
    frees little: the pages held at the peak were freed in that same backward pass (measured:
    docs/benchmarks.md)."""
    if _TRIM is None:
        return
    optimizer.register_step_post_hook(release_freed_heap)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.register_forward_hook(_trim_when_its_gradient_arrives)


def _trim_when_its_gradient_arrives(module: torch.nn.Module, inputs: Any, output: Any) -> None:
    outputs = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else [output]
    tensor = next((t for t in outputs if isinstance(t, torch.Tensor) and t.requires_grad), None)
    if tensor is not None:  # training: a gradient will arrive
        tensor.register_hook(release_freed_heap)
