"""Faults: killed runs, concurrent runs, bad input, damaged caches, determinism."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph
from tango.step_info import StepState
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, FinetuneStep, PiqaTask, PredictStep
from catwalk_steps.models import scoring
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.steps.metrics import MetricsTableFormat
from catwalk_steps.storage.atomic import AtomicJsonFormat
from catwalk_steps.tango_fixes.damaged_entries import CorruptCacheError
from catwalk_steps.tasks import DataError

from .conftest import REPO, TINY, TINY_MODEL, computed_in_this_process

pytestmark = pytest.mark.fault
TANGO = str(Path(sys.executable).with_name("tango"))
PIQA = {"type": "piqa", "data_files": {"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")}}
# Long enough to be killed in the middle (96 steps); checkpoints every 8 steps.
FINETUNE = {
    "type": "catwalk::finetune", "model": TINY_MODEL, "tasks": [PIQA], "batch_size": 16, "train_epochs": 12,
    "train_limit": 128, "validation_limit": 32, "validate_every": 8, "learning_rate": 1e-3,
}  # dropout on: resuming replays the same masks


def write_config(path: Path, steps) -> Path:
    path.write_text(json.dumps({"steps": steps}))
    return path


def start_run(config: Path, workspace: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [TANGO, "run", str(config), "-w", str(workspace)], cwd=REPO, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def wait_for(condition, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def finish(process: subprocess.Popen) -> str:
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]
    return output


def trained_steps(workspace: Path) -> int:
    (latest,) = workspace.glob("cache/*/work/checkpoints/latest.json")
    return json.loads(latest.read_text())["step"]


@pytest.mark.full
def test_training_killed_mid_run_resumes_from_its_last_checkpoint(tmp_path, caplog):
    config = write_config(tmp_path / "train.json", {"finetune": FINETUNE})
    workspace = tmp_path / "ws"
    run = start_run(config, workspace)
    wait_for(lambda: list(workspace.glob("cache/*/work/checkpoints/latest.json")) and trained_steps(workspace) >= 24)
    run.send_signal(signal.SIGKILL)
    run.wait()
    resume_at = trained_steps(workspace)
    assert 24 <= resume_at < 96
    assert not list(workspace.glob("cache/*/cache-metadata.json"))  # nothing half-cached

    with caplog.at_level(logging.INFO):  # the killed run's lock does not block
        (resumed,) = computed_in_this_process(config, "finetune", workspace=workspace)
    assert f"Resuming from the checkpoint of step {resume_at} " in caplog.text

    # Resuming gives exactly the weights of a run that was never interrupted.
    settings = {k: v for k, v in FINETUNE.items() if k != "type"}
    clean = FinetuneStep(**{**settings, "tasks": [PiqaTask(data_files=PIQA["data_files"])]}, step_name="x")
    reference = clean.result(LocalWorkspace(tmp_path / "clean"))
    for name, tensor in reference.state_dict.items():
        assert torch.equal(tensor, resumed.state_dict[name]), name


def descendants(pid: int) -> set:
    """The processes below ``pid`` (from /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.update(children)
        todo.extend(children)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has ended


#: Two workers, 48 steps: long enough to be stopped in the middle.
TWO_WORKERS = {**FINETUNE, "train_epochs": 6, "device_count": 2, "device": "cpu", "micro_batch_size": 8}


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory):
    """The two-worker run's result when nothing stops it."""
    directory = tmp_path_factory.mktemp("never-stopped")
    config = write_config(directory / "train.json", {"finetune": TWO_WORKERS})
    return computed_in_this_process(config, "finetune", workspace=directory / "ws")[0]


@pytest.mark.ddp
@pytest.mark.full
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the workers through /proc")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_two_worker_training_stopped_by_a_signal_leaves_no_process_and_resumes_to_the_same_weights(
    tmp_path, stop, never_stopped, caplog
):
    config = write_config(tmp_path / "train.json", {"finetune": TWO_WORKERS})
    workspace = tmp_path / "ws"
    run = start_run(config, workspace)
    wait_for(lambda: list(workspace.glob("cache/*/work/checkpoints/latest.json")) and trained_steps(workspace) >= 16)
    workers = descendants(run.pid)
    run.send_signal(stop)
    run.communicate(timeout=120)
    assert run.returncode != 0
    wait_for(lambda: not any(alive(pid) for pid in workers), timeout=60)  # no worker outlives the run
    assert not list(workspace.glob("cache/*/cache-metadata.json"))
    resume_at = trained_steps(workspace)

    with caplog.at_level(logging.INFO):
        (resumed,) = computed_in_this_process(config, "finetune", workspace=workspace)
    assert f"Training (resumed from step {resume_at})" in caplog.text  # rank 0's progress bar
    assert resumed.fingerprint == never_stopped.fingerprint  # bit-equal: same device count, CPU


def test_prediction_interrupted_resumes_from_the_instances_already_scored(tiny_task, tmp_path, monkeypatch):
    real = scoring.shared_context_logliks
    calls = []

    def counting(lm, **tensors):
        calls.append(len(tensors["first"]))  # one per continuation
        return real(lm, **tensors)

    def interrupted_after_three_batches(lm, **tensors):
        if len(calls) == 3:
            raise KeyboardInterrupt
        return counting(lm, **tensors)

    step = PredictStep(model=TINY_MODEL, task=tiny_task, max_batch_size=16, unconditioned=True, step_name="predict")
    workspace = LocalWorkspace(tmp_path / "ws")
    monkeypatch.setattr(scoring, "shared_context_logliks", interrupted_after_three_batches)
    with pytest.raises(KeyboardInterrupt):
        step.result(workspace)
    assert step not in workspace.step_cache

    calls.clear()
    monkeypatch.setattr(scoring, "shared_context_logliks", counting)
    resumed = PredictStep(model=TINY_MODEL, task=tiny_task, max_batch_size=16, unconditioned=True,
                          step_name="predict").result(workspace)
    total = 2 * 2 * 128  # two choices, scored with and without the question, for 128 instances
    assert sum(calls) == total - 3 * 16

    fresh = PredictStep(model=TINY_MODEL, task=tiny_task, max_batch_size=16, unconditioned=True, step_name="p").result(
        LocalWorkspace(tmp_path / "fresh")
    )
    assert resumed == fresh


@pytest.mark.full
def test_prediction_killed_resumes_in_a_new_run(tmp_path, caplog):
    steps = {"predict": {"type": "catwalk::predict", "model": TINY_MODEL, "task": PIQA, "max_batch_size": 1}}
    config, workspace = write_config(tmp_path / "predict.json", steps), tmp_path / "ws"
    run = start_run(config, workspace)

    def scored() -> int:
        journals = list(workspace.glob("cache/*/work/scores-0.jsonl"))
        return len(journals[0].read_text().splitlines()) - 1 if journals else 0

    wait_for(lambda: scored() >= 40)
    run.send_signal(signal.SIGKILL)
    run.wait()
    done = scored()
    assert not list(workspace.glob("cache/*/cache-metadata.json"))
    with caplog.at_level(logging.INFO):
        (predictions,) = computed_in_this_process(config, "predict", workspace=workspace)
    first_progress = caplog.text.split("Log-likelihood queries:")[1]  # the bar's first line
    assert f" {done}/256 " in first_progress.split("[")[0] or f"| {done}/256" in first_progress  # 128 x 2 choices
    assert len(predictions) == 128


def test_killed_while_writing_a_result_leaves_no_cache_entry(tmp_path):
    script = f"""
import os, signal
import catwalk_steps.storage.atomic as atomic
from catwalk_steps import PredictStep, PiqaTask
from tango.workspaces import LocalWorkspace

def half_written_then_killed(path, write, needed=None):
    write(path.with_name(path.name + ".tmp"))
    with open(path, "w") as f:
        f.write('[{{"id": "torn')  # as if a non-atomic writer were cut off
    os.kill(os.getpid(), signal.SIGKILL)

atomic.publish_file = half_written_then_killed
task = PiqaTask(data_files={PIQA["data_files"]!r})
PredictStep(model={TINY_MODEL!r}, task=task, limit=4, step_name="p").result(LocalWorkspace({str(tmp_path / "ws")!r}))
"""
    killed = subprocess.run([sys.executable, "-c", script], cwd=REPO)
    assert killed.returncode == -signal.SIGKILL
    step = PredictStep(model=TINY_MODEL, task=PiqaTask(data_files=PIQA["data_files"]), limit=4, step_name="p")
    workspace = LocalWorkspace(tmp_path / "ws")
    assert step not in workspace.step_cache  # the torn file is never read as a result
    assert len(step.result(workspace)) == 4
    assert len(LocalWorkspace(tmp_path / "ws").step_cache[step]) == 4


@pytest.mark.full
def test_concurrent_runs_train_once_and_share_the_result(tmp_path):
    config = write_config(tmp_path / "train.json", {"finetune": {**FINETUNE, "train_epochs": 4}})
    workspace = tmp_path / "ws"
    first, second = start_run(config, workspace), start_run(config, workspace)
    outputs = [finish(first), finish(second)]
    assert sum('Starting step "finetune"' in output for output in outputs) == 1
    assert len(list(workspace.glob("cache/*/cache-metadata.json"))) == 1


def test_same_seed_gives_the_same_weights(tiny_task, tmp_path):
    settings = dict(model=TINY_MODEL, tasks=[tiny_task], batch_size=8, train_epochs=1, train_limit=32)
    checksums = []
    for run in ("a", "b"):
        FinetuneStep(step_name="finetune", **settings).result(LocalWorkspace(tmp_path / run))
        (meta,) = (tmp_path / run).glob("cache/*/model.json")
        checksums.append(json.loads(meta.read_text())["sha256"])
    assert checksums[0] == checksums[1]


@pytest.mark.parametrize(
    "steps, message",
    [
        ({"f": {**FINETUNE, "tasks": ["piqaa"]}}, "piqaa"),
        ({"f": {**FINETUNE, "model": "rc::/no/such/model"}}, "no such local directory: /no/such/model"),
        ({"p": {"type": "catwalk::predict", "model": "gpt2", "task": PIQA}}, "Unknown model spec 'gpt2'"),
        ({"p": {"type": "catwalk::predict", "model": TINY_MODEL, "task": PIQA, "device": "cuda:3"}},
         "device='cuda:3', but only 0 CUDA devices are present"),
        ({"p": {"type": "catwalk::predict", "model": TINY_MODEL, "task": PIQA, "device": "cpu", "device_count": 512}},
         "device_count=512 CPU workers, but only"),
        ({"p": {"type": "catwalk::predict", "model": TINY_MODEL, "task": PIQA, "device": "cuda:1", "device_count": 2}},
         "device='cuda:1' names one device, but device_count=2"),
        ({"f": FINETUNE, "p": {"type": "catwalk::predict", "model": {"type": "ref", "ref": "f"}, "task": PIQA,
                               "max_batch_size": 0}}, "max_batch_size and max_batch_tokens must be positive"),
    ],
)
def test_bad_input_fails_with_a_clear_message(tmp_path, steps, message):
    with pytest.raises(Exception) as error:
        graph = StepGraph.from_params(steps)
        for step in graph.values():
            step.result(LocalWorkspace(tmp_path))
    assert message in str(error.value)
    assert not list(tmp_path.glob("cache/FinetuneStep*/work/checkpoints"))  # failed before training


@pytest.mark.parametrize("kind", ["finetune", "predict"])
def test_a_bad_data_file_fails_the_step_before_any_model_is_loaded(tmp_path, monkeypatch, kind):
    cut = tmp_path / "validation.jsonl"
    cut.write_bytes((TINY / "validation.jsonl").read_bytes()[:-20])  # its last line (128) cut off
    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(cut)})

    def loaded(*args, **kwargs):
        raise AssertionError("a tokenizer or model was loaded before the data was read")

    for name in ("load_tokenizer", "load_config"):  # every load of weights reads the config first
        monkeypatch.setattr(ModelSpec, name, loaded)
    if kind == "finetune":
        step = FinetuneStep(model=TINY_MODEL, tasks=[task], batch_size=8, step_name="f")
    else:
        step = PredictStep(model=TINY_MODEL, task=task, step_name="p")
    with pytest.raises(DataError, match=f"{cut}: line 128: not valid JSON .*probably cut off"):
        step.result(LocalWorkspace(tmp_path / "ws"))


@pytest.mark.parametrize("limit", [-1, 0])  # -1 dropped the last instance; 0 failed after the model loaded
@pytest.mark.parametrize("step, setting", [
    ({"type": "catwalk::predict", "model": TINY_MODEL, "task": PIQA}, "limit"),
    (FINETUNE, "train_limit"),
    (FINETUNE, "validation_limit"),
])
def test_a_limit_below_one_is_refused_when_the_graph_is_built(step, setting, limit):
    with pytest.raises(ConfigurationError) as error:
        StepGraph.from_params({"s": {**step, setting: limit}})
    assert str(error.value) == (f"{setting} must be at least 1 (the first {setting} instances), got {limit}: "
                                "leave it out for the whole split")


@pytest.mark.parametrize("steps, message", [
    ({"p": {"type": "catwalk::predict", "model": TINY_MODEL, "task": PIQA, "split": "valid"}},
     "split: PiqaTask has no split 'valid' (have: train, validation)"),
    ({"f": {**FINETUNE, "validation_split": "dev"}}, "validation_split: PiqaTask has no split 'dev' (have: train, validation)"),
    ({"f": {**FINETUNE, "warmup_fraction": 1.5}}, "warmup_fraction must be between 0 and 1, got 1.5"),
    ({"f": {**FINETUNE, "weight_decay": -0.1}}, "weight_decay must be at least 0, got -0.1"),
    ({"f": {**FINETUNE, "max_grad_norm": 0}}, "max_grad_norm must be positive (or null: no clipping), got 0"),
])
def test_a_split_or_range_that_cannot_work_is_refused_when_the_graph_is_built(steps, message):
    with pytest.raises(ConfigurationError) as error:
        StepGraph.from_params(steps)
    assert str(error.value) == message


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ConfigurationError) as error:
        StepGraph.from_params({"f": {**FINETUNE, "tasks": [{"type": "piqaa"}]}})
    assert "piqaa" in str(error.value) and "arc_easy" in str(error.value)


def test_malformed_jsonnet_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonnet"
    bad.write_text('{\n  steps: {\n    f: { type: "catwalk::finetune", \n  }\n')
    done = subprocess.run([TANGO, "run", str(bad), "-w", str(tmp_path / "ws")], cwd=REPO, capture_output=True, text=True)
    assert done.returncode != 0
    assert f"{bad}:4:5" in done.stdout + done.stderr


def test_unwritable_workspace_fails_before_any_step(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match="is not a writable directory"):
        LocalWorkspace(tmp_path / "file" / "ws")


# Damaged cache entries: moved aside and computed again.

def pipeline(workspace_dir: Path):
    """A small fine-tune -> predict -> metrics chain (steps built afresh: no result in memory)."""
    task = PiqaTask(data_files=PIQA["data_files"])
    finetune = FinetuneStep(model=TINY_MODEL, tasks=[task], batch_size=8, train_limit=32, validation_limit=16,
                            step_name="finetune")
    predict = PredictStep(model=finetune, task=task, limit=16, step_name="predict")
    metrics = CalculateMetricsStep(predictions=predict, step_name="metrics")
    return LocalWorkspace(workspace_dir), {"finetune": finetune, "predict": predict, "metrics": metrics}


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def cut_in_half(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES = {  # step, file in its entry, damage
    "weights": ("finetune", "model.safetensors", flip_a_byte),
    "weights-missing": ("finetune", "model.safetensors", Path.unlink),
    "model-json": ("finetune", "model.json", cut_in_half),
    "predictions": ("predict", "data.json", cut_in_half),
    "metrics": ("metrics", "data.json", lambda p: p.write_bytes(b"\xff\xfe not json")),
    "tango-metadata": ("metrics", "cache-metadata.json", cut_in_half),
}


def results(workspace: LocalWorkspace, steps) -> dict:
    """Every step of the chain made sure of in order, as Tango's executor does, then read."""
    for step in steps.values():
        step.ensure_result(workspace)
    finetuned, *rest = (step.result(workspace) for step in steps.values())
    return {"finetune": finetuned.fingerprint, **dict(zip(["predict", "metrics"], rest))}


@pytest.fixture(scope="module")
def computed(tmp_path_factory):
    """A workspace holding the chain's results, and those results."""
    directory = tmp_path_factory.mktemp("damaged") / "ws"
    return directory, results(*pipeline(directory))


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_entries_are_set_aside_and_computed_again(computed, tmp_path, caplog, damage):
    original, expected = computed
    shutil.copytree(original, tmp_path / "ws")
    workspace, steps = pipeline(tmp_path / "ws")
    name, file, damage_file = DAMAGES[damage]
    entry = workspace.step_cache.step_dir(steps[name])
    untouched = {
        other: workspace.step_cache.step_dir(step).stat().st_mtime_ns for other, step in steps.items() if other != name
    }
    damage_file(entry / file)
    damaged_bytes = (entry / file).read_bytes() if (entry / file).exists() else None

    with caplog.at_level(logging.WARNING, logger="catwalk_steps.tango_fixes.damaged_entries"):
        assert results(workspace, steps) == expected  # bit-equal: CPU training and scoring are deterministic
    (aside,) = (tmp_path / "ws" / "damaged").iterdir()
    assert aside.name.startswith(steps[name].unique_id + ".")
    if damaged_bytes is not None:
        assert (aside / file).read_bytes() == damaged_bytes  # kept as found, for a post-mortem
    assert f"moved the cache entry {entry} to {aside}" in caplog.text
    assert str(entry / file) in caplog.text  # which file was damaged, and how
    for other, mtime in untouched.items():  # only the damaged step was computed again
        assert workspace.step_cache.step_dir(steps[other]).stat().st_mtime_ns == mtime, other
    fresh_workspace, fresh = pipeline(tmp_path / "ws")  # healed for good: a new process reads it
    assert fresh_workspace.step_cache[fresh[name]] is not None
    assert fresh_workspace.step_info(fresh[name]).state == StepState.COMPLETED


@pytest.mark.full
def test_damaged_entry_heals_in_a_tango_run(tmp_path):
    steps = {
        "finetune": {**FINETUNE, "train_epochs": 1, "train_limit": 32, "batch_size": 8},
        "predict": {"type": "catwalk::predict", "model": {"type": "ref", "ref": "finetune"}, "task": PIQA, "limit": 16},
        "metrics": {"type": "catwalk::calculate_metrics", "predictions": {"type": "ref", "ref": "predict"}},
    }
    config, workspace = write_config(tmp_path / "chain.json", steps), tmp_path / "ws"
    (before,) = computed_in_this_process(config, "metrics", workspace=workspace)
    (weights,) = workspace.glob("cache/FinetuneStep-*/model.safetensors")
    flip_a_byte(weights)
    (metrics_file,) = workspace.glob("cache/CalculateMetricsStep-*/data.json")
    cut_in_half(metrics_file)

    output = finish(start_run(config, workspace))  # every cached step is read, so both are found
    assert output.count("moved the cache entry") == 2, output[-3000:]
    assert f"{weights} does not match the checksum" in output and f"{metrics_file} cannot be read as JSON" in output
    assert {s for s in ("finetune", "predict", "metrics") if f'Starting step "{s}"' in output} == {"finetune", "metrics"}
    assert LocalWorkspace(workspace).step_result("metrics") == before
    assert len(list((workspace / "damaged").iterdir())) == 2
    assert "moved the cache entry" not in finish(start_run(config, workspace))  # healed


@pytest.mark.parametrize("format_class, file", [(AtomicJsonFormat, "data.json"), (MetricsTableFormat, "table.json")])
def test_json_formats_report_unreadable_files_as_corrupt(tmp_path, format_class, file):
    (tmp_path / file).write_text('{"columns": ["a"], "ro')
    with pytest.raises(CorruptCacheError, match=f"{tmp_path / file} cannot be read as JSON"):
        format_class().read(tmp_path)
