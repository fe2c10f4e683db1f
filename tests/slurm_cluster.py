"""A real one-node Slurm cluster for the tests, as CI runs one: Debian's ``slurm-wlm`` (22.05) and
``munge``, installed with apt-get where missing, their daemons started as root from a folder of
their own (config, key, sockets, state, logs) on ports of their own, and stopped afterwards: only
the daemons started here, never a cluster or munged that was already running.

No systemd and no cgroups here, so the settings are the ones that work without them
(docs/sweeps.md): processes tracked by their parent ids, tasks not confined, each job given
its cores and ``DefMemPerCPU`` of the memory (else every job takes all of it and jobs run one at a
time), no accounting database (so no ``sacct``: a finished job's state is ``squeue``'s for
``MinJobAge`` seconds).
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional

PACKAGES = ["slurm-wlm", "munge"]
PROGRAMS = ["munged", "mungekey", "slurmctld", "slurmd", "sbatch"]


class Unavailable(Exception):
    """Why no cluster can run here (a test skips with it)."""


@dataclass
class Cluster:
    """A running cluster: pass ``env`` to every Slurm command (it names the config)."""

    folder: Path
    env: Dict[str, str]
    pids: List[int] = field(default_factory=list)  # of the daemons started, in that order
    up: bool = False  # the controller and the node answer: there may be jobs to cancel

    def run(self, *command: str, check: bool = True) -> str:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")
        return done.stdout


def install() -> None:
    """apt-get install where a daemon is missing; ``Unavailable`` where that cannot be done."""
    if all(shutil.which(name) for name in PROGRAMS):
        return
    if os.geteuid() != 0:
        raise Unavailable("Slurm is not installed and installing it needs root")
    if shutil.which("apt-get") is None:
        raise Unavailable("Slurm is not installed and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *PACKAGES]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise Unavailable(f"{' '.join(command)} failed (no network to the package mirror?): {done.stderr[-500:]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(folder: Path, host: str, cpus: int, memory_mb: int) -> str:
    ports = free_port(), free_port()
    return "\n".join([
        "ClusterName=tests",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={folder / 'munge.socket'}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",  # no cgroups here
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        f"DefMemPerCPU={memory_mb // cpus}",  # else a job takes every byte and jobs run one at a time
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=5",
        "MinJobAge=3600",  # seconds a finished job stays in squeue, where the tests read its state  # seconds between a cancelled job's SIGTERM and SIGKILL (default 30)
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise Unavailable("no MemTotal in /proc/meminfo")


def start(cluster: Cluster) -> None:
    """Installs where needed and starts munged, slurmctld and slurmd in the cluster's folder,
    recording their pids as they start; waits until the node is idle. Stop it with ``stop``,
    whatever happens (also when this raises)."""
    if os.geteuid() != 0:
        raise Unavailable("the Slurm daemons run as root here (SlurmUser=root) and this is not root")
    install()
    folder = cluster.folder
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)  # munged refuses a key or socket in a folder that others may write
    host = socket.gethostname().split(".")[0]
    Path(cluster.env["SLURM_CONF"]).write_text(slurm_conf(folder, host, os.cpu_count() or 1, memory_mb()))
    key = folder / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    daemons = [
        ["munged", "--force", f"--socket={folder / 'munge.socket'}", f"--key-file={key}",
         f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
         f"--seed-file={folder / 'munged.seed'}"],
        ["slurmctld", "-f", cluster.env["SLURM_CONF"]],
        ["slurmd", "-f", cluster.env["SLURM_CONF"]],
    ]
    for command in daemons:  # each forks into the background and writes its pid file
        done = subprocess.run(command, env=cluster.env, capture_output=True, text=True, timeout=60)
        pid = _wait_for_pid(folder / f"{command[0]}.pid")
        if pid is not None:
            cluster.pids.append(pid)
        if done.returncode != 0 or pid is None:
            log = _tail(folder / f"{command[0]}.log")
            raise RuntimeError(f"{command[0]} did not start: {done.stdout}{done.stderr}{log}")
    _wait_until_idle(cluster)
    cluster.up = True


def _wait_for_pid(pid_file: Path, timeout: float = 20) -> Optional[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.2)
    return None


def _wait_until_idle(cluster: Cluster, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = cluster.run("sinfo", "-h", "-o", "%t", check=False).strip()
        if state == "idle":
            return
        time.sleep(0.5)
    raise RuntimeError(f"the node is not idle after {timeout:.0f} s: {state!r}\n{_tail(cluster.folder / 'slurmd.log')}")


def _tail(log: Path) -> str:
    return log.read_text()[-2000:] if log.exists() else ""


def stop(cluster: Cluster, timeout: float = 30) -> None:
    """Cancels every job (all are the tests') and stops the daemons started here."""
    deadline = time.monotonic() + timeout
    if cluster.up:
        cluster.run("scancel", "--full", "--user=root", check=False)
        while time.monotonic() < deadline and cluster.run("squeue", "-h", check=False).strip():
            time.sleep(0.5)
    for pid in reversed(cluster.pids):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def running(folder: Path) -> Iterator[Cluster]:
    """A generator for a fixture: the cluster, then stopped (also after a failed start)."""
    cluster = Cluster(folder, {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")})
    try:
        start(cluster)
        yield cluster
    finally:
        stop(cluster)
