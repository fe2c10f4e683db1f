"""Which devices the workers of a step run on: decided here, for every step."""

import os
from typing import List

import torch
from tango.common.exceptions import ConfigurationError


def available_cpus() -> int:
    """Cores this process may run on: its affinity mask (as set by taskset, cgroups' cpusets or a
    job scheduler), not the machine's core count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_device_type(device: str, device_count: int) -> str:
    """The device type that ``device_count`` workers run on (``"cuda"``: one device each;
    ``"cpu"``: processes sharing out the cores), checked before anything runs. It fails loudly
    where Tango's trainer would quietly fall back to the CPU."""
    if device_count < 1:
        raise ConfigurationError(f"device_count must be at least 1, got {device_count}")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        available = torch.cuda.device_count()
        if device_count > available:
            raise ConfigurationError(f"device_count={device_count}, but only {available} CUDA devices are present")
        return device
    if device == "cpu":
        cores = available_cpus()
        if device_count > cores:
            raise ConfigurationError(f"device_count={device_count} CPU workers, but only {cores} cores are available")
        return device
    raise ConfigurationError(f"device must be 'auto', 'cuda' or 'cpu', got {device!r}")


def resolve_device(device: str) -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is taken as a torch device name."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as e:
        raise ConfigurationError(f"Unknown device {device!r}: {e}")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigurationError(f"device={device!r}, but no CUDA device is present")
    return resolved


def worker_devices(device: str, device_count: int) -> List[torch.device]:
    """One device per worker: ``device`` itself for one worker (``"cuda:1"`` allowed), else CUDA
    devices 0..N-1 or N CPU processes, checked against the devices or cores present."""
    if device_count == 1:
        return [resolve_device(device)]
    device_type = worker_device_type(device, device_count)
    if device_type == "cuda":
        return [torch.device("cuda", rank) for rank in range(device_count)]
    return [torch.device("cpu")] * device_count
