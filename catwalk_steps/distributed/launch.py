"""Starting distributed workers: one per device, or several CPU processes sharing out the cores.

Workers meet through a file in a fresh temporary directory, not a TCP port: a port picked by
binding and closing a socket can be taken by a parallel step before the workers bind it.
"""

import os
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tango.common.logging import EnvVarNames, initialize_worker_logging
from tango.common.util import get_extra_imported_modules, import_extra_module

from .devices import available_cpus


def launch(
    fn: Callable[..., None], world_size: int, device_type: str, *args: Any, port: Optional[int] = None
) -> None:
    """Runs ``fn(rank, world_size, *args)`` on ``world_size`` workers with a process group set
    up (in this process when ``world_size`` is 1). A worker's exception fails the launch with its
    traceback, and the other workers are stopped: none is left waiting at a collective.

    The error reported is the first one raised, not the first one noticed: when a worker fails,
    its peers fail next at their collectives ("connection closed by peer"), and any of those may
    be the process ``mp.spawn`` happens to see first."""
    if world_size == 1:
        fn(0, 1, *args)
        return
    with tempfile.TemporaryDirectory(prefix="catwalk-rendezvous-") as rendezvous:
        init_method = f"tcp://127.0.0.1:{port}" if port else f"file://{rendezvous}/store"
        try:
            mp.spawn(
                _worker,
                args=(fn, world_size, device_type, init_method, rendezvous, get_extra_imported_modules(), args),
                nprocs=world_size,
            )
        except mp.ProcessRaisedException as error:  # a worker killed by a signal is reported as it is
            first = _first_error(Path(rendezvous))
            if first is None:
                raise
            raise RuntimeError(first) from error


def _first_error(rendezvous: Path) -> Optional[str]:
    reports = [report.read_text().split("\n", 1) for report in rendezvous.glob("error-*")]
    return min(reports, key=lambda report: float(report[0]))[1] if reports else None


def _worker(
    rank: int, fn, world_size: int, device_type: str, init_method: str, rendezvous: str, packages, args
) -> None:
    for package in packages:  # the config's include_package, for registered callbacks
        import_extra_module(package)
    if os.environ.get(EnvVarNames.LOGGING_PORT.value):  # the parent collects workers' logs
        initialize_worker_logging(rank)
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(max(1, available_cpus() // world_size))
    backend = "nccl" if device_type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=init_method, world_size=world_size, rank=rank)
    try:
        fn(rank, world_size, *args)
    except BaseException:  # recorded before the process group goes down and the peers fail in turn
        report = f"{time.time()}\nworker {rank} of {world_size} failed first:\n{traceback.format_exc()}"
        Path(rendezvous, f"error-{rank}").write_text(report)
        raise
    finally:
        dist.destroy_process_group()
