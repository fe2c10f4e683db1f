"""Starting a step's workers with torch's elastic engine (the launcher behind ``torchrun``): one
per device, or several CPU processes sharing out the cores, on one node or several.

On one node the workers meet through a c10d store on a port the operating system picks (as
``torchrun --standalone`` does), so parallel steps cannot race for a port. Across nodes every
node's agent meets at one endpoint, hosted by node 0 (see :mod:`.rendezvous`). A worker that
fails fails the launch with its own traceback; with ``max_restarts`` the agents restart the whole
worker group instead, and the workers resume from what they saved (checkpoints, journals).
"""

import ctypes
import os
import tempfile
import time
import traceback
import uuid
from datetime import timedelta
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional

import torch
import torch.distributed as dist
from tango.common.logging import EnvVarNames, initialize_worker_logging
from tango.common.util import get_extra_imported_modules, import_extra_module
from .devices import available_cpus

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

#: The workers' function: ``fn(rank, world_size, device, *args)``.
WorkerFn = Callable[..., None]

#: How the workers' processes start: "spawn", a fresh interpreter each, importing torch and the
#: model code anew (seconds per worker). The test suite, which launches dozens of times in one
#: process, sets "forkserver" with those modules preloaded (tests/conftest.py).
START_METHOD = "spawn"


class WorkerFailedError(RuntimeError):
    """A worker of a launch failed; the message holds its traceback (or the signal that killed it)."""


@dataclass
class Nodes:
    """Where this process's workers meet the other nodes' (one node: nowhere but here).

    ``endpoint`` is ``host:port`` of the rendezvous, hosted by the node with ``is_host``; ``run_id``
    tells one run's rendezvous from another's; ``join_timeout`` is how long (s) the agents wait for
    every node to arrive."""

    count: int = 1
    endpoint: str = "localhost:0"
    is_host: bool = True
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    join_timeout: int = 600


def launch(
    fn: WorkerFn,
    devices: List[torch.device],
    *args: Any,
    nodes: Optional[Nodes] = None,
    max_restarts: int = 0,
) -> None:
    """Runs ``fn(rank, world_size, device, *args)`` on one worker per entry of ``devices`` (this
    node's), on every node, with a process group set up. One worker on one node without
    restarts runs in this process."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousTimeoutError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch  # 1 s of imports: only here

    nodes = nodes or Nodes()
    if len(devices) == 1 and nodes.count == 1 and max_restarts == 0:
        fn(0, 1, devices[0], *args)
        return
    with tempfile.TemporaryDirectory(prefix="catwalk-failures-") as folder:
        reports = Path(folder)
        config = LaunchConfig(
            min_nodes=nodes.count,
            max_nodes=nodes.count,
            nproc_per_node=len(devices),
            run_id=nodes.run_id,
            rdzv_backend="c10d",
            rdzv_endpoint=nodes.endpoint,
            rdzv_configs={"is_host": nodes.is_host, "join_timeout": nodes.join_timeout},
            max_restarts=max_restarts,
            monitor_interval=0.1,
            start_method=START_METHOD,
            # The agents' per-worker files, in this folder (by default a torchelastic_* folder
            # that nothing removes: one per launch, left in the temp folder).
            logs_specs=DefaultLogsSpecs(log_dir=str(reports / "elastic")),
        )
        try:
            elastic_launch(config, _worker)(fn, devices, get_extra_imported_modules(), reports, args)
        except ChildFailedError as error:
            raise WorkerFailedError(_first_failure(error, reports, nodes.count * len(devices))) from error
        except RendezvousTimeoutError as error:  # its own message is empty
            raise TimeoutError(
                f"{nodes.count} nodes did not all arrive at the rendezvous {nodes.endpoint} (run {nodes.run_id}) "
                f"within {nodes.join_timeout} s: start `python -m catwalk_steps.join` on the other nodes"
            ) from error


def _first_failure(error: "ChildFailedError", reports: Path, world_size: int) -> str:
    """Which worker failed first, and how. A crash (a worker killed by a signal other than the
    agent's SIGTERM) is the cause of whatever its peers then raise; else the earliest exception
    raised, by the time each worker noted before its peers could fail in turn at a collective
    ("connection reset by peer"); the agent's own record keeps only whole seconds."""
    crashed = [(rank, f) for rank, f in sorted(error.failures.items()) if f.exitcode < 0 and f.signal_name() != "SIGTERM"]
    if crashed:
        rank, failure = crashed[0]
        return f"worker {rank} of {world_size} was killed by {failure.signal_name()}"
    raised = [path.read_text().split("\n", 1) for path in reports.glob("failure-*")]
    if raised:
        return min(raised, key=lambda report: float(report[0]))[1]
    return error.format_msg()


#: Allocations from this size up are mapped apart, and unmapped when freed (glibc's mallopt).
MMAP_THRESHOLD = 4 << 20


def _return_freed_memory() -> None:
    """glibc raises its mmap threshold as large blocks are freed, so that a worker's gathered
    parameters and gradients, freed block by block, then stay in its heap: measured at a
    GPT-2-medium shape under FSDP, 3.58 GiB peak per worker against 2.91 GiB with the threshold
    fixed (docs/benchmarks.md). A fixed threshold turns that off. Elsewhere than glibc: nothing."""
    try:
        ctypes.CDLL(None).mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def _store(rank: int, world_size: int) -> dist.Store:
    """The store the process group meets in: the agents' own (or rank 0's), under a prefix per
    restart. Unprefixed, a restarted group can read a dead worker's address from the attempt
    before and fail to connect to it (seen with gloo, ``max_restarts``)."""
    agents_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
        is_master=not agents_store and rank == 0, timeout=timedelta(minutes=30),
    )
    return dist.PrefixStore(f"catwalk/attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def _worker(fn: WorkerFn, devices: List[torch.device], packages: List[str], reports: Path, args: tuple) -> None:
    """A worker's life, its error recorded for the agent (``record``)."""
    from torch.distributed.elastic.multiprocessing.errors import record

    record(_work)(fn, devices, packages, reports, args)


def _work(fn: WorkerFn, devices: List[torch.device], packages: List[str], reports: Path, args: tuple) -> None:
    """The config's packages (for registered callbacks), logging to the parent, the worker's
    device and threads, the process group, then ``fn``."""
    for package in packages:
        import_extra_module(package)
    _return_freed_memory()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if os.environ.get(EnvVarNames.LOGGING_PORT.value):  # the launching process collects workers' logs
        initialize_worker_logging(rank)
    device = devices[int(os.environ["LOCAL_RANK"])]
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, available_cpus() // len(devices)))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=_store(rank, world_size), rank=rank,
                            world_size=world_size)
    try:
        fn(rank, world_size, device, *args)
    except BaseException:  # noted before the process group goes down and the peers fail in turn
        report = f"{time.time()}\nworker {rank} of {world_size} failed first:\n{traceback.format_exc()}"
        (reports / f"failure-{rank}").write_text(report)
        raise
    dist.destroy_process_group()
