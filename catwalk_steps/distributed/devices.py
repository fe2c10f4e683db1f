"""Which devices a step's workers run on: decided here, for every step, where the step runs.

A step graph may be built on another machine than the one that runs it (Tango's remote
executors build it on the submitting host, which often has no GPU), so building it checks only
the form of a device setting (:func:`check_device_setting`); the devices and cores present are
checked when the step starts, before any model is loaded (:func:`worker_devices`).
"""

import os
from typing import Any, Dict, List

import torch
from tango.common.exceptions import ConfigurationError

DEVICE_TYPES = ("cpu", "cuda")


def available_cpus() -> int:
    """Cores this process may run on: its affinity mask (as set by taskset, cgroups' cpusets or a
    job scheduler), not the machine's core count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _parse(device: str) -> torch.device:
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigurationError(f"Unknown device {device!r}: use 'auto', 'cpu', 'cuda' or e.g. 'cuda:1' ({e})")
    if parsed.type not in DEVICE_TYPES:
        raise ConfigurationError(f"device {device!r}: only 'auto', 'cpu' and 'cuda' devices are supported")
    return parsed


def check_device_setting(device: str, device_count: int) -> None:
    """The form of a step's device setting, checked when the step graph is built: nothing about
    the devices of the machine that builds it."""
    if device_count < 1:
        raise ConfigurationError(f"device_count must be at least 1, got {device_count}")
    if device == "auto":
        return
    parsed = _parse(device)
    if parsed.index is not None and device_count > 1:
        raise ConfigurationError(
            f"device={device!r} names one device, but device_count={device_count}: use 'cuda' for "
            f"devices 0..{device_count - 1} (CUDA_VISIBLE_DEVICES picks which)"
        )


def gpu_count(settings: Dict[str, Any]) -> int:
    """The GPUs a step with these ``device`` and ``device_count`` settings asks Tango's executor
    for: every worker's, unless it is set to the CPU (``"auto"`` asks for GPUs: a step that can
    use them should get them)."""
    device, device_count = settings.get("device", "auto"), settings.get("device_count", 1)
    return 0 if device != "auto" and _parse(device).type == "cpu" else device_count


def worker_devices(device: str, device_count: int) -> List[torch.device]:
    """One device per worker on this machine, checked against the devices or cores present: CUDA
    devices 0..N-1 (or the one named, for one worker), or N CPU processes sharing out the cores.
    Called where the step runs, before any model is loaded. It fails loudly where Tango's trainer
    would quietly fall back to the CPU."""
    check_device_setting(device, device_count)
    wanted = torch.device("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else _parse(device)
    if wanted.type == "cuda":
        present = torch.cuda.device_count()
        if wanted.index is not None:
            if wanted.index >= present:
                raise ConfigurationError(f"device={device!r}, but only {present} CUDA devices are present")
            return [wanted]
        if device_count > present:
            raise ConfigurationError(f"device_count={device_count}, but only {present} CUDA devices are present")
        return [torch.device("cuda", rank) for rank in range(device_count)]
    cores = available_cpus()
    if device_count > cores:
        raise ConfigurationError(f"device_count={device_count} CPU workers, but only {cores} cores are available")
    return [torch.device("cpu")] * device_count
