"""The parts of the training loop that make its result independent of how it ran: the batch
plan, derived seeds, kill-safe checkpoints, worker start-up and CPU sharing."""

import os
import tempfile
import threading

import pytest
import torch
import torch.distributed as dist
from tango.common.exceptions import ConfigurationError

from catwalk_steps.training import checkpoints as checkpoints_module
from catwalk_steps.training.batches import BatchPlan
from catwalk_steps.training.checkpoints import CheckpointStore, Progress
from catwalk_steps.training.seeds import derive_seed
from catwalk_steps.distributed.devices import available_cpus, worker_devices
from catwalk_steps.distributed.launch import WorkerFailedError, launch


@pytest.mark.parametrize("num_examples", [32, 37, 101])
def test_every_step_is_a_whole_global_batch_split_alike_on_any_world_size(num_examples):
    plan = BatchPlan(num_examples, batch_size=8, micro_batch_size=2, seed=3)
    assert plan.steps_per_epoch == num_examples // 8
    for step in range(3 * plan.steps_per_epoch):
        batch = plan.step_examples(step)
        assert len(batch) == 8 and len(set(batch)) == 8
        micro = {w: [mb for rank in range(w) for mb in plan.micro_batches(step, rank, w)] for w in (1, 2, 4)}
        assert sorted(micro[1]) == sorted(micro[2]) == sorted(micro[4])  # same micro-batches, any world size
        assert sorted(i for _, examples in micro[1] for i in examples) == sorted(batch)
    for epoch in range(3):  # an epoch leaves out its remainder, and only that
        steps = range(epoch * plan.steps_per_epoch, (epoch + 1) * plan.steps_per_epoch)
        assert len({i for step in steps for i in plan.step_examples(step)}) == num_examples - num_examples % 8
    with pytest.raises(ConfigurationError, match="device_count=3 workers cannot share equally"):
        plan.micro_batches(0, 0, 3)


def test_epochs_have_their_own_order_and_seeds_their_own_epochs():
    plan = BatchPlan(64, batch_size=8, micro_batch_size=8, seed=42)
    assert plan.epoch_order(0) != plan.epoch_order(1)
    # seed + epoch would make seed 42's second epoch seed 43's first.
    assert BatchPlan(64, 8, 8, seed=43).epoch_order(0) != plan.epoch_order(1)
    assert derive_seed(42, "dropout", 1, 0) != derive_seed(43, "dropout", 0, 0)
    assert derive_seed(42, "dropout", 1, 0) == derive_seed(42, "dropout", 1, 0) < 2**63


def model_and_optimizer(value: float):
    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(value)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()  # Adam state to save
    return model, optimizer


def checkpoint(store: CheckpointStore, step: int, value: float, validations):
    model, optimizer = model_and_optimizer(value)
    store.save(model, optimizer, {"schedule": {"step": step}}, Progress(step, list(validations)), rank=0, world_size=1)
    return model, optimizer


def test_checkpoints_keep_the_latest_and_the_best(tmp_path):
    store = CheckpointStore(tmp_path)
    records = []
    for step, acc in [(2, 0.5), (4, 0.75), (6, 0.6), (8, 0.7)]:
        records.append({"step": step, "val_acc": acc, "val_loss": 1.0})
        saved, saved_optimizer = checkpoint(store, step, float(step), records)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-0000004", "step-0000008"]
    model, optimizer = model_and_optimizer(0.0)
    state = store.load(store.latest(), model, optimizer)
    progress = Progress(**state["progress"])
    assert progress.step == 8 and progress.best["step"] == 4 and state["training_state"]["schedule"]["step"] == 8
    assert torch.equal(model.weight, saved.weight)
    for key, value in saved_optimizer.state[saved.weight].items():  # Adam's moments, restored exactly
        assert torch.equal(optimizer.state[model.weight][key], value), key
    store.load_weights(store.path(4), model)
    assert torch.equal(model.weight, model_and_optimizer(4.0)[0].weight)


@pytest.mark.parametrize("killed_in", ["dcp_save", "replace", "publish_text"])
def test_a_kill_while_checkpointing_leaves_the_previous_checkpoint_readable(tmp_path, monkeypatch, killed_in):
    import torch.distributed.checkpoint as dcp

    store = CheckpointStore(tmp_path)
    checkpoint(store, 2, 2.0, [])

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    target = {"dcp_save": (dcp, "save"), "replace": (os, "replace"),
              "publish_text": (checkpoints_module, "publish_text")}[killed_in]
    monkeypatch.setattr(*target, killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoint(store, 4, 4.0, [])
    monkeypatch.undo()

    model, optimizer = model_and_optimizer(0.0)
    state = store.load(store.latest(), model, optimizer)
    assert state["progress"]["step"] == 2 and torch.equal(model.weight, model_and_optimizer(2.0)[0].weight)
    checkpoint(store, 4, 4.0, [])  # the next run's checkpoint replaces whatever was left
    assert store.latest() == store.path(4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json", "step-0000004"]


def test_cpu_workers_follow_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert available_cpus() == 1
    with pytest.raises(ConfigurationError, match="device_count=2 CPU workers, but only 1 cores are available"):
        worker_devices("cpu", 2)


def _sum_of_ranks(rank: int, world_size: int, device: torch.device, out: str) -> None:
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    with open(f"{out}.{rank}", "w") as f:
        f.write(f"{total.item()} {torch.get_num_threads()}")


def _fails_on_rank_one(rank: int, world_size: int, device: torch.device) -> None:
    if rank == 1:
        raise ValueError("worker 1 failed")
    dist.barrier()  # rank 0 would wait here forever if the failure were not propagated


@pytest.mark.ddp
def test_parallel_launches_need_no_port_and_a_failing_worker_fails_the_launch(tmp_path, monkeypatch):
    # Two 2-worker groups started at once: no port to race for.
    cpus = [torch.device("cpu")] * 2
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # what the launches leave in the temp folder
    runs = [threading.Thread(target=launch, args=(_sum_of_ranks, cpus, str(tmp_path / name))) for name in "ab"]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    for name in "ab":
        for rank in (0, 1):
            total, threads = (tmp_path / f"{name}.{rank}").read_text().split()
            assert float(total) == 1.0 and int(threads) == max(1, available_cpus() // 2)
    for _ in range(2):  # whichever worker the agent notices first, the error is rank 1's own
        with pytest.raises(WorkerFailedError, match="(?s)worker 1 of 2 failed first.*ValueError: worker 1 failed"):
            launch(_fails_on_rank_one, cpus)
    # The agents' log folders go with the launch (torch's default: a torchelastic_* folder each, kept).
    assert not list(temp.glob("torchelastic_*"))
