"""Counting the calls that make the host wait for a CUDA device, on any device (CPU included).

On a GPU, the host queues kernels and runs ahead; a call that needs a value, a shape that depends
on values, or a pageable host<->device copy stops it until the queue drains, and the device then
idles while the host prepares the next work. A few such waits per batch are unavoidable (the
results must come back); one per instance or per choice makes small batches host-bound, which is
what a scorer several times faster than lm-evaluation-harness on CPU and slower on an H200 looks
like. On CPU nothing waits, but the calls are the same Python calls, so counting them here keeps
them from creeping back (``tests/test_syncs.py``) and names them in a profile
(``benchmarks/profiling.py``).

Counted: reading values (``item``, ``tolist``, ``numpy``, ``__bool__``/``__int__``/``__float__``/
``__index__``, as ``if t:`` and ``int(t)`` do), copies between host and device (``cpu``; ``to`` naming a
device, from a host tensor or to another device; ``torch.tensor``/``torch.as_tensor`` of some
data with a ``device``: on CPU these copy nothing, but they are where a GPU run copies, and a
pageable copy waits; a ``non_blocking`` copy from pinned memory does not, and is not counted),
and value-dependent shapes (``nonzero``, ``masked_select``, indexing with a boolean mask,
``unique``, ``repeat_interleave`` without ``output_size``). Each is attributed to the innermost
frame outside torch, so the count says whose code waits (ours, transformers', lm-eval's).
"""

import contextlib
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

import torch

_TORCH_DIR = str(Path(torch.__file__).parent)
_THIS_FILE = __file__

#: Tensor methods and torch functions that wait for the values they return or depend on.
_READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")
_VALUE_SHAPES = ("nonzero", "masked_select", "unique", "argwhere")


def _is_bool_index(index) -> bool:
    if isinstance(index, tuple):
        return any(_is_bool_index(i) for i in index)
    return isinstance(index, torch.Tensor) and index.dtype == torch.bool


def _is_copy(tensor: torch.Tensor, args, kwargs) -> bool:
    """``tensor.to(...)`` names a device and starts on the host (a copy to a device on a GPU run;
    a stand-in for one on CPU) or on another device than it names (a copy either way), unless
    it is a ``non_blocking`` copy from pinned memory (queued on the stream: the host goes on)."""
    device = kwargs.get("device", next((a for a in args if isinstance(a, (torch.device, str))), None))
    if device is None or (kwargs.get("non_blocking") and tensor.is_pinned()):
        return False
    target = torch.device(device)
    elsewhere = target.type != tensor.device.type or target.index not in (None, tensor.device.index)
    return tensor.device.type == "cpu" or elsewhere


def _has_data_for_device(data=None, *args, **kwargs) -> bool:
    """``torch.tensor(data, device=...)`` with something to copy."""
    if kwargs.get("device") is None:
        return False
    return not (isinstance(data, (list, tuple)) and len(data) == 0)


class SyncCounter:
    """Counts of synchronising calls, by ``(kind, call site)``; :meth:`mark` snapshots them (e.g.
    at each batch's end) so that :meth:`per_mark` counts per batch."""

    def __init__(self) -> None:
        self.counts: "Counter[Tuple[str, str]]" = Counter()
        self.marks: "List[Counter[Tuple[str, str]]]" = [Counter()]
        self._depth = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def mark(self) -> None:
        self.marks.append(Counter(self.counts))

    def per_mark(self, prefix: str = "") -> List[int]:
        """Calls between consecutive marks (the first since counting began) at call sites that
        start with ``prefix`` (e.g. ``catwalk_steps/``: our own code's)."""
        return [sum(n for (_, site), n in (b - a).items() if site.startswith(prefix))
                for a, b in zip(self.marks, self.marks[1:])]

    def _site(self) -> str:
        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename.startswith(_TORCH_DIR)
                                     or frame.f_code.co_filename == _THIS_FILE):
            frame = frame.f_back
        if frame is None:
            return "?"
        path = frame.f_code.co_filename
        for root in ("catwalk_steps/", "transformers/", "lm_eval/", "benchmarks/", "tests/"):
            if root in path:
                path = root + path.rsplit(root, 1)[1]
                break
        return f"{path}:{frame.f_code.co_name}"

    def _wrap(self, original: Callable, kind: str, counts: Callable[..., bool] = lambda *a, **k: True) -> Callable:
        def counted(*args, **kwargs):
            if self._depth == 0 and counts(*args, **kwargs):
                self.counts[(kind, self._site())] += 1
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1

        counted.__wrapped__ = original
        return counted

    def _patches(self) -> Iterator[Tuple[object, str, Callable]]:
        tensor = torch.Tensor
        for name in _READS:
            yield tensor, name, self._wrap(getattr(tensor, name), name)
        for name in _VALUE_SHAPES:
            yield tensor, name, self._wrap(getattr(tensor, name), name)
            yield torch, name, self._wrap(getattr(torch, name), name)
        yield tensor, "repeat_interleave", self._wrap(
            tensor.repeat_interleave, "repeat_interleave", lambda *a, **k: "output_size" not in k)
        yield tensor, "__getitem__", self._wrap(
            tensor.__getitem__, "boolean index", lambda t, index: _is_bool_index(index))
        yield tensor, "to", self._wrap(tensor.to, "to(device)", lambda t, *a, **k: _is_copy(t, a, k))
        for name in ("tensor", "as_tensor"):
            yield torch, name, self._wrap(getattr(torch, name), f"torch.{name}(device=)", _has_data_for_device)

    @contextlib.contextmanager
    def counting(self) -> Iterator["SyncCounter"]:
        """Patches the calls while the block runs (one counter at a time; not thread-safe)."""
        saved = []
        try:
            for owner, name, wrapper in self._patches():
                saved.append((owner, name, getattr(owner, name)))
                setattr(owner, name, wrapper)
            yield self
        finally:
            for owner, name, original in reversed(saved):
                setattr(owner, name, original)


@contextlib.contextmanager
def count_syncs() -> Iterator[SyncCounter]:
    """``with count_syncs() as syncs: ...``, then ``syncs.total``, ``syncs.counts``."""
    with SyncCounter().counting() as counter:
        yield counter
