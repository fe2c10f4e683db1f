"""Launching workers with torch's elastic engine: across "nodes" (two processes on this machine,
one running ``tango run`` as node 0 and one ``python -m catwalk_steps.join``), restarts after a
worker is killed, and devices decided where a step runs, never where its graph is built."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.integrations.torch import TrainCallback
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep, PiqaTask, PredictStep, join
from catwalk_steps.distributed import launch as distributed_launch
from catwalk_steps.models import loading

from .conftest import REPO, TINY, TINY_MODEL, computed_in_this_process

TANGO = str(Path(sys.executable).with_name("tango"))
PIQA = {"type": "piqa", "data_files": {"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")}}
# Dropout on; 8 steps of 16 with 2 micro-batches each, a validation and checkpoint every 4.
TRAINING = dict(
    model=TINY_MODEL, batch_size=16, micro_batch_size=8, train_epochs=1, train_limit=128, validation_limit=32,
    validate_every=4, learning_rate=1e-3,
)
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def weights_of(workspace: Path) -> dict:
    from safetensors.torch import load_file

    (path,) = workspace.glob("cache/FinetuneStep-*/model.safetensors")
    return load_file(str(path))


def run_config(tmp_path: Path, name: str, **settings) -> Path:
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"steps": {"finetune": {"type": "catwalk::finetune", "tasks": [PIQA], **TRAINING,
                                                         **settings}}}))
    return config


@pytest.fixture(scope="module")
def one_node(tmp_path_factory) -> Path:
    """The workspace of one node with two workers training the model, under `tango run`'s key."""
    directory = tmp_path_factory.mktemp("one-node")
    config = run_config(directory, "one", nodes=1, device_count=2, device="cpu")
    computed_in_this_process(config, "finetune", workspace=directory / "ws1")
    return directory / "ws1"


@pytest.mark.e2e
@pytest.mark.ddp
@pytest.mark.full
@pytest.mark.parametrize("launcher", ["join first", "slurm node script, node 0 first"])
def test_two_nodes_train_the_model_of_one_node_with_two_workers(tmp_path, launcher, one_node, capsys):
    two_nodes = run_config(tmp_path, "nodes", nodes=2, device_count=1, device="cpu")

    def start(command, env=ENV):
        return subprocess.Popen(command, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    if launcher == "join first":  # any node may start first
        node0 = start([TANGO, "run", str(two_nodes), "-w", str(tmp_path / "ws2")])
        # Node 1 joins from this process (its main() is `python -m catwalk_steps.join`'s exit
        # status), long before node 0's `tango run` has started up and published its endpoint.
        assert join.main([str(two_nodes), "finetune", "-w", str(tmp_path / "ws2")]) == 0
        assert "finetune succeeded" in capsys.readouterr().out
        processes = [node0]
    else:  # as srun starts examples/finetune_node.sh on each node
        script = ["examples/finetune_node.sh", str(two_nodes), "finetune", str(tmp_path / "ws2")]
        processes = [start(script, {**ENV, "SLURM_NODEID": str(node)}) for node in (0, 1)]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    assert launcher == "join first" or "finetune succeeded" in outputs[1]
    a, b = weights_of(tmp_path / "ws2"), weights_of(one_node)
    assert [p.name for p in (tmp_path / "ws2" / "cache").glob("FinetuneStep-*")] == [
        p.name for p in (one_node / "cache").glob("FinetuneStep-*")
    ]  # the same cache key
    # 1 node of 2 workers and 2 nodes of 1 run the same micro-batches with the same dropout
    # masks and sum the same gradients over the same group: the README's 1e-4 across device counts.
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4


def test_slurm_submission_asks_for_the_steps_nodes(tmp_path):
    config = run_config(tmp_path, "nodes", nodes=2, device_count=1, device="cpu")
    stand_in = tmp_path / "bin" / "sbatch"  # no Slurm here: a stand-in that shows what it was asked
    stand_in.parent.mkdir()
    stand_in.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\necho 42\n')
    stand_in.chmod(0o755)
    env = {**ENV, "PATH": f"{stand_in.parent}:{Path(sys.executable).parent}:{ENV['PATH']}"}  # this venv's python
    submitted = subprocess.run(["examples/slurm_finetune.sh", str(config), "finetune", str(tmp_path / "ws"),
                                "--gres=gpu:8"], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert submitted.stdout == "42\n" and "Submitted finetune on 2 node(s) (job 42)" in submitted.stderr
    args = (stand_in.parent / "args").read_text()
    assert "--nodes=2 --ntasks-per-node=1 --gres=gpu:8" in args and "examples/finetune_node.sh" in args


def test_joining_without_node_0_fails_naming_the_timeout(tmp_path, capsys):
    config = run_config(tmp_path, "nodes", nodes=2, device_count=1, device="cpu")
    # `python -m catwalk_steps.join ...` exits with what its main() returns
    assert join.main([str(config), "finetune", "-w", str(tmp_path / "ws"), "--timeout", "2"]) == 1
    stderr = capsys.readouterr().err
    assert "No node 0 published a rendezvous endpoint" in stderr and "within 2 s" in stderr


class KillOnce(TrainCallback):
    """SIGKILLs worker 1 at its third step, once (a marker in the work dir remembers)."""

    def pre_batch(self, step: int, epoch: int, batch) -> None:
        marker = self.work_dir / "killed-once"
        if self.train_config.worker_id == 1 and step == 5 and not marker.exists():
            marker.write_text("")
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.ddp
@pytest.mark.fault
@pytest.mark.full
def test_a_killed_worker_is_restarted_and_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, one_node):
    task = PiqaTask(data_files=PIQA["data_files"])
    common = dict(TRAINING, tasks=[task], device="cpu", device_count=2, step_name="finetune")
    restarted = FinetuneStep(max_restarts=1, callbacks=[Lazy(KillOnce)], **common)
    result = restarted.result(LocalWorkspace(tmp_path / "restarted"))
    assert (LocalWorkspace(tmp_path / "restarted").work_dir(restarted) / "killed-once").exists()
    assert FinetuneStep(**common).unique_id == restarted.unique_id  # callbacks and restarts: not in the key
    # Uninterrupted: what one node's two workers trained (a cache hit).
    (plain,) = computed_in_this_process(one_node.parent / "one.json", "finetune", workspace=one_node)
    assert result.training_metrics == plain.training_metrics
    for name, tensor in plain.state_dict.items():  # resumed on the same device count: bit for bit
        assert torch.equal(result.state_dict[name], tensor), name
    # Spawned, as `tango run` starts them: the agent names the crashed worker by which of the
    # workers' exits it sees first, and a fork server under load can report both exits at once.
    monkeypatch.setattr(distributed_launch, "START_METHOD", "spawn")
    with pytest.raises(RuntimeError, match="worker 1 of 2 was killed by SIGKILL"):
        FinetuneStep(callbacks=[Lazy(KillOnce)], **common).result(LocalWorkspace(tmp_path / "no-restarts"))


def test_devices_are_decided_where_the_step_runs(monkeypatch, tiny_task, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    finetune = FinetuneStep(tasks=[tiny_task], step_name="f", device="cuda", device_count=8, batch_size=16,
                            micro_batch_size=2, model=TINY_MODEL)
    assert finetune.resources.gpu_count == 8
    assert FinetuneStep(tasks=[tiny_task], model=TINY_MODEL, device="auto", device_count=2, batch_size=16,
                        micro_batch_size=8).resources.gpu_count == 2
    assert FinetuneStep(tasks=[tiny_task], model=TINY_MODEL, device="cpu", device_count=2, batch_size=16,
                        micro_batch_size=8).resources.gpu_count == 0
    predict = PredictStep(model=TINY_MODEL, task=tiny_task, device="cuda:1", step_name="p")
    assert predict.resources.gpu_count == 1
    assert PredictStep(model=TINY_MODEL, task=tiny_task, device="cuda", device_count=4).resources.gpu_count == 4

    def no_loading(*args, **kwargs):
        raise AssertionError("a model or tokenizer was loaded before the devices were checked")

    monkeypatch.setattr(loading.ModelSpec, "load_tokenizer", no_loading)
    monkeypatch.setattr(loading.ModelSpec, "load_config", no_loading)  # every load of weights reads the config first
    with pytest.raises(ConfigurationError, match="device_count=8, but only 0 CUDA devices are present"):
        finetune.result(LocalWorkspace(tmp_path / "ws"))
    with pytest.raises(ConfigurationError, match="device='cuda:1', but only 0 CUDA devices are present"):
        predict.result(LocalWorkspace(tmp_path / "ws"))
