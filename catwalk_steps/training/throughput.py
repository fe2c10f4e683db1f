"""Training speed in the progress line: this worker's examples/s and tokens/s, and on a CUDA
device of known peak, its model FLOPs utilisation (MFU = 6 x parameters x tokens/s / peak: a
forward and a backward pass cost about 6 FLOPs per parameter per token; with LoRA the frozen
weights need no weight gradients, so MFU overstates the work done by up to a third).

Only the steps are timed, from the top of a step to its end (validation and checkpoints are
not), and rates are taken at logging steps, after the loss is read back: by then the device has
finished every step of the interval, so host time that ran ahead of the device is not counted
as done. Tokens are those the model reads (padding excluded), counted on the host tensors the
collator made, before they reach the device: no synchronisation is added.

W&B and TensorBoard get ``train/examples_per_s`` and ``train/tokens_per_s`` from
:mod:`.tracking`: every worker's share, validation time excluded the same way, and each
(context, choice) pair's tokens as tokenized. This line counts this worker's, and the positions
its model reads (a context shared by its choices once: the work MFU measures).
"""

import time
from typing import Dict, Optional, Sequence

import torch

#: Dense (no sparsity) peak FLOP/s, by a fragment of ``torch.cuda.get_device_name``, for the
#: matmuls of bf16-mixed and of fp32 (TF32 off: torch's default for matmuls), per vendor data sheets.
PEAKS = {
    "H200": {"bf16-mixed": 989e12, "32": 67e12},
    "H100 PCIe": {"bf16-mixed": 756e12, "32": 51e12},
    "H100 NVL": {"bf16-mixed": 835e12, "32": 60e12},
    "H100": {"bf16-mixed": 989e12, "32": 67e12},
    "A100": {"bf16-mixed": 312e12, "32": 19.5e12},
}
_READ_MASKS = ("attention_mask", "context_mask", "mask")  # plain and shared-context layouts


def batch_tokens(batch: Dict[str, torch.Tensor]) -> int:
    """Positions a micro-batch's forward pass reads, padding excluded: its attention mask (plain
    layout) or its contexts' and continuations' masks (shared-context layout)."""
    return sum(int(batch[key].sum()) for key in _READ_MASKS if key in batch)


def peak_flops(device: torch.device, precision: str) -> Optional[float]:
    """The device's peak FLOP/s at ``precision``, or ``None`` (CPU, a GPU not in :data:`PEAKS`, or a
    MIG slice of one, which has a fraction of its peak)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if "MIG" in name:
        return None
    return next((peaks.get(precision) for fragment, peaks in PEAKS.items() if fragment in name), None)


class Throughput:
    """Examples and tokens per second of timed steps since the last :meth:`rates`."""

    def __init__(self, parameters: int, peak: Optional[float]) -> None:
        self.parameters, self.peak = parameters, peak
        self.examples = self.tokens = 0
        self.seconds, self.started = 0.0, None

    def begin(self) -> None:
        self.started = time.perf_counter()

    def count(self, examples: int, batches: Sequence[Dict[str, torch.Tensor]]) -> None:
        self.examples += examples
        self.tokens += sum(batch_tokens(batch) for batch in batches)

    def end(self) -> None:
        if self.started is not None:
            self.seconds += time.perf_counter() - self.started
            self.started = None

    def rates(self) -> Dict[str, str]:
        """Ends the current step's span; ``{"ex/s", "tok/s"[, "mfu"]}`` for the progress bar."""
        self.end()
        seconds = max(self.seconds, 1e-9)
        tokens_per_second = self.tokens / seconds
        shown = {"ex/s": f"{self.examples / seconds:.1f}", "tok/s": f"{tokens_per_second:.0f}"}
        if self.peak:
            shown["mfu"] = f"{6 * self.parameters * tokens_per_second / self.peak:.1%}"
        self.examples = self.tokens = 0
        self.seconds = 0.0
        return shown
