"""Where a scorer's time goes, batch by batch: host time, device time and the host-device
synchronisations of each batch, under ``torch.profiler`` (CPU activity, and CUDA's on a GPU),
with one Chrome trace per scorer. Run by ``benchmarks/gpu.py --profile`` (on CPU too).

Host time is the wall time from one batch's end to the next (what the host spent preparing,
launching and waiting). Our scorer reads a batch's results once the next one is queued, so a
batch "ends" when it is read: the first span queues two batches, the last only reads, and the
spans between are the steady cadence. Device time is the kernels' time launched by the ops run
in that span (the profiler's ``self_device_time_total``; 0 on CPU). A batch whose host time
exceeds its device time leaves the device idle; its sync count (``benchmarks/syncs.py``) says how often the host
stopped to wait, and where (every call site is named under the table). lm-evaluation-harness's
scorer has no per-batch hook, so it is profiled whole. The profiler and the counting patches add
host time of their own: for rates, run ``benchmarks/gpu.py`` without ``--profile``.
"""

from contextlib import ExitStack
from pathlib import Path
from typing import Callable, List, Sequence

import torch
from torch.profiler import ProfilerActivity, profile, record_function

try:
    from syncs import SyncCounter  # run from benchmarks/ (gpu.py)
except ImportError:  # imported as benchmarks.profiling (tests)
    from benchmarks.syncs import SyncCounter


def _activities() -> List[ProfilerActivity]:
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])


def _host_events(events):
    """The host's events (a kernel is also an event of its own on the device's timeline, and a
    ``record_function`` range a device-side annotation too)."""
    return [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]


def _device_us(events, start: float, end: float) -> float:
    """Kernel time of the host ops that began between ``start`` and ``end`` (profiler
    microseconds), each kernel counted once (its launching op's own share)."""
    return sum(e.self_device_time_total for e in _host_events(events)
               if start <= e.time_range.start < end and not e.name.startswith("batch "))


class _Batches:
    """``on_batch`` for :func:`~catwalk_steps.models.scoring.score_queries`: closes one batch's
    profiler range, marks the sync count, and opens the next range."""

    def __init__(self, syncs: SyncCounter) -> None:
        self.syncs, self.sizes, self.stack = syncs, [], ExitStack()

    def open(self) -> None:
        self.stack.enter_context(record_function(f"batch {len(self.sizes) + 1}"))

    def __call__(self, scored: Sequence) -> None:
        self.stack.close()
        self.syncs.mark()
        self.sizes.append(len(scored))
        self.open()


def profile_ours(lm, queries: Sequence, directory: Path, name: str, **options) -> None:
    """Profiles ``score_queries(lm, queries, **options)`` and prints a row per batch."""
    from catwalk_steps.models.scoring import score_queries

    syncs = SyncCounter()
    batches = _Batches(syncs)
    with profile(activities=_activities()) as prof, syncs.counting():
        batches.open()
        score_queries(lm, queries, on_batch=batches, **options)
        batches.stack.close()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(directory / f"{name}.json"))
    events = prof.events()
    ranges = {e.name: e.time_range for e in _host_events(events) if e.name.startswith("batch ")}
    per_batch, ours = syncs.per_mark(), syncs.per_mark("catwalk_steps/")
    for k, size in enumerate(batches.sizes, start=1):
        span = ranges[f"batch {k}"]
        print(f"| {name} | {k} | {size} | {span.elapsed_us() / 1e3:.2f} | {_device_us(events, span.start, span.end) / 1e3:.2f} "
              f"| {per_batch[k - 1]} | {ours[k - 1]} |")
    _summary(name, syncs, len(batches.sizes))


def profile_whole(scorer: Callable[[], object], directory: Path, name: str) -> None:
    """Profiles one call of ``scorer`` (no batch boundaries known) and prints one row."""
    syncs = SyncCounter()
    with profile(activities=_activities()) as prof, syncs.counting():
        with record_function("batch all"):
            scorer()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(directory / f"{name}.json"))
    events = prof.events()
    span = next(e.time_range for e in _host_events(events) if e.name == "batch all")
    print(f"| {name} | all | - | {span.elapsed_us() / 1e3:.2f} | {_device_us(events, span.start, span.end) / 1e3:.2f} "
          f"| {syncs.total} | - |")
    _summary(name, syncs, None)


def _summary(name: str, syncs: SyncCounter, batches) -> None:
    per = f", {syncs.total / batches:.1f} per batch" if batches else ""
    sites = ", ".join(f"{kind} at {site} x{n}" for (kind, site), n in syncs.counts.most_common())
    print(f"|  | {name}: {syncs.total} syncs{per}: {sites} |  |  |  |  |  |")


def header() -> None:
    print("\n| scorer / data | batch | queries | host ms | device ms | syncs | ours |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
