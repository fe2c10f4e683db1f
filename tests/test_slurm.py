"""The tiny sweep through a real one-node Slurm (tests/slurm_cluster.py) with docs/sweeps.md's
command, `examples/slurm_sweep.sh CONFIG WORKSPACE`, and its recovery, the same command again:

1. submitted while the node takes no jobs, then submitted again: the second submission replaces
   the first, whose jobs were all pending (an earlier submission is never left beside a new one);
2. once the node takes jobs, a fine-tuning job is cancelled after its first checkpoint: Slurm
   cancels the evaluations that needed it, the other jobs run, and the table job fails naming the
   missing metrics steps; nothing is left queued;
3. the same command again submits only what is missing and finishes the sweep: the table equals a
   sequential `tango run`'s cell for cell, and every step started once over all the jobs' logs,
   but the cancelled fine-tuning, which started twice and resumed from its checkpoint.
"""

import re
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
from tango.step_graph import StepGraph
from tango.workspaces import LocalWorkspace

from . import slurm_cluster
from .conftest import REPO
from .documented import documented_argv
from .tango_runs import OFFLINE, SWEEP, TANGO, started_steps

pytestmark = [pytest.mark.e2e, pytest.mark.full]
SUBMITTED = re.compile(r"Submitted (\d+) step jobs and the table \(job (\d+)\) as ([^;\s]+);")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[slurm_cluster.Cluster]:
    try:
        yield from slurm_cluster.running(tmp_path_factory.mktemp("slurm"))
    except slurm_cluster.Unavailable as reason:
        pytest.skip(f"no Slurm cluster here: {reason}")


@dataclass
class Submission:
    output: str
    step_jobs: int
    table_job: str
    name: str


@dataclass
class Sweep:
    workspace: Path
    config: Path
    replaced: Submission
    first: Submission
    pending_after_resubmitting: List[str]  # job ids
    cancelled: str  # the fine-tuning step
    states_after_cancelling: Dict[str, str]  # job id: state
    recovery: Submission
    states_after_recovery: Dict[str, str]


def submit(cluster: slurm_cluster.Cluster, config: Path, workspace: Path) -> Submission:
    env = {**cluster.env, **OFFLINE, "PATH": f"{Path(TANGO).parent}:{cluster.env['PATH']}",  # this venv, activated
           "OMP_NUM_THREADS": "1",  # 2 one-core jobs at a time: torch's threads spin when oversubscribed
           "TANGO_LOG_LEVEL": "info"}  # for the line that says a fine-tuning resumed
    command = documented_argv("examples/slurm_sweep.sh configs/sweep_tiny.jsonnet /shared/workspace",
                              **{"configs/sweep_tiny.jsonnet": str(config), "/shared/workspace": str(workspace)})
    done = subprocess.run(command, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (count, table, name), = SUBMITTED.findall(done.stdout)
    return Submission(done.stdout + done.stderr, int(count), table, name)


def states(cluster: slurm_cluster.Cluster, name: str) -> Dict[str, str]:
    """Every job of that name, finished ones too (for MinJobAge seconds), by id."""
    lines = cluster.run("squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i %T").split()
    return dict(zip(lines[::2], lines[1::2]))


def wait_until_ended(cluster: slurm_cluster.Cluster, name: str, timeout: float = 600) -> Dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = states(cluster, name)
        assert found, f"no job named {name}"
        if not set(found.values()) & {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"}:
            return found
        time.sleep(1)
    raise AssertionError(f"jobs still queued after {timeout:.0f} s: {found}")


@pytest.fixture(scope="module")
def sweep(cluster, tmp_path_factory) -> Sweep:
    folder = tmp_path_factory.mktemp("slurm-sweep")
    config, workspace = folder / "sweep_tiny.jsonnet", folder / "workspace"
    # The shipped sweep, its files exported here and not into the repository.
    config.write_text(f'(import "{REPO / SWEEP}") + {{ steps+: {{ export+: {{ output_dir: "{folder / "results"}" }} }} }}\n')
    graph = StepGraph.from_file(config)
    finetune = next(name for name in graph if name.startswith("finetune_"))
    checkpoint = workspace / "cache" / graph[finetune].unique_id / "work" / "checkpoints" / "latest.json"
    node = socket.gethostname().split(".")[0]

    cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=tests: queue, no start")
    replaced = submit(cluster, config, workspace)
    first = submit(cluster, config, workspace)
    pending = [job for job, state in states(cluster, first.name).items() if state == "PENDING"]
    cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")

    started = time.monotonic()
    while not checkpoint.exists():  # cancelled right after its first checkpoint, seconds before it ends
        assert time.monotonic() - started < 600, f"{finetune} wrote no checkpoint"
        time.sleep(0.05)
    (log,) = (workspace / "slurm-logs").glob(f"{finetune}-*.out")
    cluster.run("scancel", log.stem.rpartition("-")[2])
    after_cancelling = wait_until_ended(cluster, first.name)
    print(f"the sweep, {finetune} cancelled: {time.monotonic() - started:.0f} s")

    started = time.monotonic()
    recovery = submit(cluster, config, workspace)
    after_recovery = wait_until_ended(cluster, first.name)
    print(f"the recovery: {time.monotonic() - started:.0f} s")
    return Sweep(workspace, config, replaced, first, pending, finetune, after_cancelling, recovery, after_recovery)


def test_submitting_again_replaces_an_earlier_submission_still_queued(sweep):
    assert sweep.replaced.name == sweep.first.name
    assert "Cancelling the jobs of an earlier submission of this sweep" in sweep.first.output
    # 4 fine-tunings, an evaluation job for each fine-tuned model and one for the stock models
    assert sweep.replaced.step_jobs == sweep.first.step_jobs == 9
    assert len(sweep.pending_after_resubmitting) == 10 and sweep.first.table_job in sweep.pending_after_resubmitting
    assert sweep.replaced.table_job not in sweep.pending_after_resubmitting


def test_a_cancelled_fine_tuning_takes_its_evaluations_and_the_table_with_it(sweep):
    first = {job: sweep.states_after_cancelling[job] for job in sweep.pending_after_resubmitting}
    assert Counter(first.values()) == {"COMPLETED": 7, "CANCELLED": 2, "FAILED": 1}, first
    assert first[sweep.first.table_job] == "FAILED"
    table_log = (sweep.workspace / "slurm-logs" / f"table-{sweep.first.table_job}.out").read_text()
    missing = sweep.cancelled.replace("finetune_", "metrics_")
    assert "no table: these metrics steps are not in" in table_log
    assert f"  {missing}-piqa\n  {missing}-tools\n" in table_log
    assert f"examples/slurm_sweep.sh {sweep.config} {sweep.workspace}" in table_log


def test_the_same_command_again_runs_what_is_missing_and_leaves_nothing_queued(sweep):
    assert sweep.recovery.step_jobs == 2  # the cancelled fine-tuning and its evaluations
    recovery = {job: state for job, state in sweep.states_after_recovery.items() if job not in sweep.states_after_cancelling}
    assert set(recovery.values()) == {"COMPLETED"} and len(recovery) == 3, recovery


def test_the_table_equals_a_sequential_runs_cell_for_cell(sweep, sequential_sweep):
    table = LocalWorkspace(sweep.workspace).step_cache[StepGraph.from_file(sweep.config)["table"]]
    expected = LocalWorkspace(sequential_sweep).step_result_for_run("sweep", "table")
    assert table.columns == expected.columns and table.rows == expected.rows  # both at one thread
    assert (sweep.workspace.parent / "results" / "metrics.csv").read_text() == expected.to_csv()


def test_every_step_started_once_but_the_cancelled_fine_tuning_which_resumed(sweep, sequential_sweep):
    logs = sorted((sweep.workspace / "slurm-logs").glob("*.out"))
    counts = Counter(name for log in logs for name in started_steps(log.read_text()))
    every_step = set(LocalWorkspace(sequential_sweep).registered_run("sweep").steps)
    assert set(counts) == every_step
    assert {name: n for name, n in counts.items() if n != 1} == {sweep.cancelled: 2}
    cancelled, resumed = sorted((sweep.workspace / "slurm-logs").glob(f"{sweep.cancelled}-*.out"),
                                key=lambda log: int(log.stem.rpartition("-")[2]))
    assert "Training" in cancelled.read_text()  # the killed attempt's lines are kept
    assert "Resuming from the checkpoint of step" in resumed.read_text()


def test_logs_go_to_the_workspace_one_per_job_and_nothing_to_the_repository(sweep):
    logged = {log.stem.rpartition("-")[2] for log in (sweep.workspace / "slurm-logs").iterdir()}
    jobs = {**sweep.states_after_cancelling, **sweep.states_after_recovery}
    ran = {job for job, state in jobs.items() if state in ("COMPLETED", "FAILED")}
    (cancelled_while_running,) = logged - ran  # the others were cancelled before they started
    assert jobs[cancelled_while_running] == "CANCELLED" and len(logged) == len(ran) + 1
    assert not list(REPO.glob("slurm-*.out")) and not list(REPO.glob("*.steps.txt"))
