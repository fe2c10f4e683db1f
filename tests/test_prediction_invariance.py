"""The promise of PredictStep: its predictions do not depend on how they were computed.

Batch size and worker count change only which queries are padded together. That moves a summed
log-likelihood by float rounding, within LOGLIK_TOLERANCE, so a decision may differ only where
its two best choices are within twice that of each other (a near-tie, visible as ``margin``).
"""

import multiprocessing
import os
import signal
import threading
import time

import pytest
import torch
from tango.workspaces import LocalWorkspace

from catwalk_steps import PredictStep
from catwalk_steps.distributed import launch as distributed_launch
from catwalk_steps.distributed.launch import WorkerFailedError
from catwalk_steps.kinds.multiple_choice import top_two_margin

from .conftest import TINY_MODEL

#: Largest difference allowed between summed log-likelihoods scored in different batches (CPU,
#: float32). Measured on the demo's models: at most 8e-6. The README states it.
LOGLIK_TOLERANCE = 1e-4
LIMIT = 64  # instances: 256 queries, with and without the question


def all_logliks(record):
    return record["logliks"] + record.get("unconditioned_logliks", [])


def assert_same_predictions(a, b, what: str) -> None:
    """Same instances, log-likelihoods within the tolerance, decisions equal except near-ties."""
    assert [r["id"] for r in a] == [r["id"] for r in b]
    worst = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(all_logliks(ra), all_logliks(rb)))
    flips = [
        (ra["id"], ra["margin"], rb["margin"]) for ra, rb in zip(a, b)
        if ra["logliks"].index(max(ra["logliks"])) != rb["logliks"].index(max(rb["logliks"]))
    ]
    print(f"{what}: largest log-likelihood difference {worst:.1e}, {len(flips)} decisions differ {flips}")
    assert worst <= LOGLIK_TOLERANCE
    assert all(min(ma, mb) <= 2 * LOGLIK_TOLERANCE for _, ma, mb in flips), flips


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    from catwalk_steps import PiqaTask

    from .conftest import TINY

    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    step = PredictStep(model=TINY_MODEL, task=task, limit=LIMIT, device="cpu", unconditioned=True, step_name="predict")
    return step, step.result(LocalWorkspace(tmp_path_factory.mktemp("one-worker")))


def test_margin_is_the_lead_of_the_chosen_answer(one_worker):
    """The margin against torch.topk's two best, and against the chosen answer's lead over every
    other choice (no sorting at all)."""
    _, predictions = one_worker
    for record in predictions:
        logliks = torch.tensor(record["logliks"], dtype=torch.float64)
        best, second = torch.topk(logliks, 2).values.tolist()
        chosen = int(logliks.argmax())
        lead = min(record["logliks"][chosen] - x for i, x in enumerate(record["logliks"]) if i != chosen)
        assert record["margin"] == best - second == lead


@pytest.mark.parametrize("logliks, margin", [
    ([-1.0, -3.0], 2.0),
    ([-3.0, -1.0], 2.0),  # the chosen answer need not come first
    ([-4.0, -1.25, -2.0, -9.5], 0.75),  # over the runner-up, not the last
    ([-2.0, -0.5, -0.5], 0.0),  # a tie: no lead
])
def test_margin_of_hand_written_choices(logliks, margin):
    assert top_two_margin(logliks) == margin


@pytest.mark.ddp
def test_two_workers_give_the_one_worker_predictions(one_worker, tiny_task, tmp_path):
    one_step, one = one_worker
    step = PredictStep(model=TINY_MODEL, task=tiny_task, limit=LIMIT, device="cpu", device_count=2, unconditioned=True,
                       step_name="predict")
    assert step.unique_id == one_step.unique_id
    two = step.result(LocalWorkspace(tmp_path))
    assert len(two) == LIMIT
    assert_same_predictions(one, two, "1 vs 2 workers")
    # Each worker journaled its shard (else the step fails: "left ... queries unscored"); the
    # journals went once the predictions were cached.
    assert not list((tmp_path / "cache" / step.unique_id / "work").glob("scores-*.jsonl"))


def test_batch_size_does_not_change_predictions(tiny_task, tmp_path):
    by_size = {}
    for size in (1, 7, 64):
        step = PredictStep(model=TINY_MODEL, task=tiny_task, limit=32, max_batch_size=size, unconditioned=True,
                           step_name="predict")
        by_size[size] = step.result(LocalWorkspace(tmp_path / str(size)))
    assert_same_predictions(by_size[1], by_size[7], "max_batch_size 1 vs 7")
    assert_same_predictions(by_size[1], by_size[64], "max_batch_size 1 vs 64")


def _kill_worker_once_it_scored(journal, entries: int, killed: list) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if journal.exists() and len(journal.read_text().splitlines()) > entries:
            workers = [p for p in multiprocessing.active_children() if p.name.startswith("SpawnProcess-")]
            worker = max(workers, key=lambda p: int(p.name.split("-")[1]))  # rank 1: started last
            os.kill(worker.pid, signal.SIGKILL)
            killed.append(worker.pid)
            return
        time.sleep(0.005)


@pytest.mark.ddp
@pytest.mark.fault
@pytest.mark.full
def test_a_killed_worker_fails_the_step_and_a_rerun_resumes_every_shard(
    one_worker, tiny_task, tmp_path, monkeypatch
):
    # Spawned, as `tango run` starts them: the agent names the crashed worker by which of the
    # workers' exits it sees first, and a fork server under load can report both exits at once.
    forked = distributed_launch.START_METHOD
    monkeypatch.setattr(distributed_launch, "START_METHOD", "spawn")
    _, one = one_worker
    workspace = LocalWorkspace(tmp_path)

    def step() -> PredictStep:  # batches of 1: slow enough to be killed half-way
        return PredictStep(model=TINY_MODEL, task=tiny_task, limit=LIMIT, device="cpu", device_count=2,
                           max_batch_size=1, unconditioned=True, step_name="predict")

    work = workspace.work_dir(step())
    killed: list = []
    killer = threading.Thread(target=_kill_worker_once_it_scored, args=(work / "scores-1.jsonl", 20, killed))
    killer.start()
    with pytest.raises(WorkerFailedError, match="worker 1 of 2 was killed by SIGKILL"):
        step().result(workspace)
    killer.join()
    assert killed and step() not in workspace.step_cache
    monkeypatch.setattr(distributed_launch, "START_METHOD", forked)  # the rerun's workers may fork

    def entries():
        return {p.name: len(p.read_text().splitlines()) - 1 for p in work.glob("scores-*.jsonl")}

    before = entries()
    assert 0 < before["scores-1.jsonl"] < 2 * LIMIT, before
    monkeypatch.setattr(PredictStep, "clean_work_dir", lambda self, work_dir: None)  # to count the journals
    resumed = step().result(workspace)
    after = entries()
    assert sum(after.values()) == 4 * LIMIT, (before, after)  # every query scored once, over both runs
    assert_same_predictions(one, resumed, "2 workers, one killed, resumed")
