"""Experiment tracking (W&B, TensorBoard), all offline: what a fine-tune logs, read back from
W&B's offline run file and TensorBoard's event files, against the step's own result; one run
per step whatever the worker count; a resumed step continues its run; a W&B that cannot be had
changes nothing but a warning."""

import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.step_graph import StepGraph
from tango.workspaces import LocalWorkspace

from catwalk_steps import ExportPredictionsStep, FinetuneStep
from catwalk_steps.tracking.settings import RunIdentity, Tracking, WandbSettings
from catwalk_steps.tracking.wandb_run import WandbRun

from .conftest import NO_DROPOUT, TINY, TINY_MODEL
from .test_export import TABLE
from .test_training_config import FailAt
from .wandb_records import offline_runs

# 32 examples in batches of 8: 4 steps, a validation (16 instances) and a checkpoint every 2.
SMALL = dict(
    model=TINY_MODEL, batch_size=8, micro_batch_size=4, train_epochs=1, train_limit=32, validation_limit=16,
    validate_every=2, config_overrides=NO_DROPOUT, log_every=1,
)
TRACKED = dict(wandb_project="catwalk-test", wandb_group="sweep-1", wandb_tags=["tiny", "piqa"])


def finetune(task, **settings) -> FinetuneStep:
    return FinetuneStep(step_name="finetune", tasks=[task], **{**SMALL, **settings})


@pytest.fixture(autouse=True)
def fresh_wandb():
    """wandb reads the environment once per process: each test starts it anew."""
    yield
    closed_wandb()


def closed_wandb() -> None:
    """Closes this process's W&B service, which completes its runs' files (``finish`` returns
    before they are all written)."""
    import wandb

    wandb.teardown()


def offline_environment(monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """One tracked fine-tune (W&B offline and TensorBoard), shared by the tests that read it."""
    from catwalk_steps import PiqaTask

    from .conftest import TINY

    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    root = tmp_path_factory.mktemp("tracked")
    with pytest.MonkeyPatch.context() as monkeypatch:
        offline_environment(monkeypatch)
        step = finetune(task, tensorboard_dir=str(root / "tensorboard"), **TRACKED)
        workspace = LocalWorkspace(root / "ws")
        result = step.result(workspace)
        closed_wandb()
    return task, step, workspace, result, root / "tensorboard"


def test_the_wandb_run_holds_the_config_the_curves_and_the_best_validation(tracked):
    _, step, workspace, result, _ = tracked
    (run,) = offline_runs(workspace.work_dir(step) / "wandb")
    assert run.run_id.startswith(step.unique_id + "-") and run.exit_code == 0
    assert (run.project, run.group, run.tags, run.name) == ("catwalk-test", "sweep-1", ["tiny", "piqa"], "finetune")
    assert run.config["step_id"] == step.unique_id and run.config["world_size"] == 1
    assert run.config["batch_size"] == 8 and run.config["model"] == TINY_MODEL
    assert run.config["tasks"][0]["class"] == "PiqaTask"
    assert not {"wandb_project", "log_every", "device_count", "tensorboard_dir"} & set(run.config)  # not in the key

    history = result.training_metrics["history"]
    assert run.series("train/loss") == history["loss"]  # the same numbers, at the same steps
    assert [step for step, _ in run.series("val/acc")] == [v["step"] for v in history["validations"]]
    assert [acc for _, acc in run.series("val/acc")] == [v["val_acc"] for v in history["validations"]]
    assert [loss for _, loss in run.series("val/loss")] == [v["val_loss"] for v in history["validations"]]
    for name in ("train/lr", "train/grad_norm", "train/examples_per_s", "train/tokens_per_s", "train/peak_memory_gib"):
        assert [s for s, _ in run.series(name)] == [1, 2, 3, 4], name
    assert run.series("train/lr")[0][1] == 0.0  # the first step's: the warm-up starts at 0
    assert all(value > 0 for _, value in run.series("train/grad_norm") + run.series("train/tokens_per_s"))

    metrics = result.training_metrics
    best = {"best/step": metrics["step"], "best/acc": metrics["val_acc"], "best/loss": metrics["val_loss"]}
    assert {k: run.summary[k] for k in best} == best


def test_tensorboard_gets_the_same_scalars(tracked):
    _, step, _, result, board = tracked
    (run_dir,) = board.iterdir()
    assert run_dir.name.startswith("finetune-")
    history = result.training_metrics["history"]
    loss = tensorboard_series(run_dir, "train/loss")
    assert [s for s, _ in loss] == [s for s, _ in history["loss"]]
    assert [v for _, v in loss] == pytest.approx([v for _, v in history["loss"]], rel=1e-6)  # stored as float32
    assert [s for s, _ in tensorboard_series(run_dir, "val/acc")] == [v["step"] for v in history["validations"]]
    for name in ("train/lr", "train/grad_norm", "train/tokens_per_s", "summary/best/acc"):
        assert tensorboard_series(run_dir, name), name


def test_tracking_settings_stay_out_of_the_key_and_are_checked_when_the_graph_is_built(tiny_task, monkeypatch):
    plain = finetune(tiny_task)
    assert finetune(tiny_task, tensorboard_dir="tb", wandb_name="x", **TRACKED).unique_id == plain.unique_id
    with pytest.raises(ConfigurationError, match="wandb_entity without wandb_project"):
        finetune(tiny_task, wandb_entity="team")
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a))
    with pytest.raises(ConfigurationError, match=r"wandb_project needs the `wandb` package.*\[wandb\]"):
        finetune(tiny_task, wandb_project="p")
    assert ExportPredictionsStep(output_dir="/tmp/x").unique_id == ExportPredictionsStep(
        output_dir="/tmp/x", wandb_project=None).unique_id


def test_wandb_tags_given_as_a_string_are_refused(tiny_task):
    step = {"type": "catwalk::finetune", "model": TINY_MODEL, "tasks": [{"type": "piqa", "data_files": {
        "train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")}}],
        "wandb_project": "p", "wandb_tags": "gpt2"}
    message = """wandb_tags must be a list, got the string 'gpt2': write ["gpt2"] for one item"""
    with pytest.raises(ConfigurationError, match=re.escape(message)):  # it was the tags g, p, t, 2
        StepGraph.from_params({"f": step})
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        finetune(tiny_task, wandb_project="p", wandb_tags="gpt2")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free once closed: nothing listens there


def test_an_unreachable_server_costs_a_warning_and_the_run_goes_offline(tracked, tmp_path, monkeypatch, caplog):
    task, step, _, reference, _ = tracked
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    workspace = LocalWorkspace(tmp_path / "ws")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="catwalk_steps"):
        result = step.result(workspace)
    assert time.monotonic() - started < 60  # training included; W&B's share is bounded by WAIT_BUDGET
    assert result.state_dict.keys() == reference.state_dict.keys()
    assert all(torch.equal(result.state_dict[k], reference.state_dict[k]) for k in reference.state_dict)
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("catwalk_steps")
                  and r.levelno >= logging.WARNING]
    closed_wandb()
    assert "no answer from http://127.0.0.1" in warning and "wandb sync" in warning
    (run,) = offline_runs(workspace.work_dir(step) / "wandb")  # nothing logged is lost
    assert run.series("train/loss") == result.training_metrics["history"]["loss"]


def test_not_logged_in_costs_a_warning_and_the_run_goes_offline(tmp_path, monkeypatch, caplog):
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # answers 501
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc, no saved login
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home" / "wandb"))
    run = WandbRun(WandbSettings("catwalk-test"), RunIdentity("no-login", "no-login", tmp_path, {}))
    try:
        with caplog.at_level(logging.WARNING, logger="catwalk_steps"):
            run.open()
            run.log({"x": 1.0}, step=1)
            run.finish()
    finally:
        server.shutdown()
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("catwalk_steps")]
    closed_wandb()
    assert warning.startswith("W&B: could not start the run") and "logging offline" in warning
    (logged,) = offline_runs(tmp_path / "wandb")
    assert logged.run_id == "no-login" and logged.series("x") == [[1, 1.0]]


def test_an_unwritable_tensorboard_dir_costs_a_warning(tmp_path, caplog):
    from catwalk_steps.tracking.training import TrainingTracker

    (tmp_path / "file").write_text("")
    tracking = Tracking(RunIdentity("x", "x", tmp_path), tensorboard_dir=tmp_path / "file" / "runs")
    tracker = TrainingTracker(tracking, 0, job=None, world_size=1, device=torch.device("cpu"))
    with caplog.at_level(logging.WARNING, logger="catwalk_steps"):
        tracker.start(0)
    assert not tracker.trackers and "not logging to TensorBoard" in caplog.text


def test_a_crashed_wandb_service_reopens_the_run_offline(tmp_path, monkeypatch, caplog):
    offline_environment(monkeypatch)
    identity = RunIdentity("crash-test", "crash", tmp_path, {"lr": 0.1})
    run = WandbRun(WandbSettings("catwalk-test"), identity)
    run.open()
    run.log({"x": 1.0}, step=1)
    services = subprocess.run(["pgrep", "-P", str(os.getpid()), "wandb-core"], capture_output=True, text=True).stdout
    assert services.split(), "no wandb-core service to crash"
    for pid in services.split():
        os.kill(int(pid), signal.SIGKILL)
    time.sleep(0.5)
    with caplog.at_level(logging.WARNING, logger="catwalk_steps"):
        run.log({"x": 2.0}, step=2)
        run.summarize({"best": 2.0})
        run.finish()
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("catwalk_steps")]
    closed_wandb()
    assert warning.startswith("W&B: the run failed") and "logging offline" in warning
    # What the killed service had not yet written is gone; from the crash on, the same run, offline.
    reopened = offline_runs(tmp_path / "wandb")[-1]
    assert reopened.run_id == "crash-test" and reopened.exit_code == 0
    assert reopened.series("x") == [[2, 2.0]] and reopened.summary["best"] == 2.0 and reopened.config["lr"] == 0.1


def test_the_results_table_and_charts_reach_wandb(tmp_path, monkeypatch):
    offline_environment(monkeypatch)
    out = tmp_path / "out"
    ExportPredictionsStep(step_name="export", output_dir=str(out), table=TABLE, chart="acc",
                          wandb_project="catwalk-test", wandb_name="results").result(LocalWorkspace(tmp_path / "ws"))
    closed_wandb()
    (run,) = offline_runs(out / "wandb")
    assert run.name == "results"
    cells = {k: v for k, v in run.summary.items() if k.startswith(("piqa/", "tools/"))}
    assert cells == {
        "piqa/tiny/zero-shot/acc": 0.5, "piqa/tiny/zero-shot/acc_norm": 0.25, "piqa/tiny/zero-shot/count": 2,
        "piqa/tiny/fine-tuned/acc": 0.75, "piqa/tiny/fine-tuned/count": 101,
        "tools/tiny/zero-shot/acc": 0.3, "tools/tiny/zero-shot/count": 10,
    }
    assert run.summary["results/_type"] == "table-file" and run.summary["charts/acc/_type"] == "image-file"
    (table_file,) = (out / "wandb").glob(f"offline-run-*/files/{run.summary['results/path']}")
    logged = json.loads(table_file.read_text())
    assert logged["columns"] == TABLE.columns
    assert logged["data"] == [[row.get(c) for c in TABLE.columns] for row in TABLE.rows]
    (chart,) = (out / "wandb").glob(f"offline-run-*/files/{run.summary['charts/acc/path']}")
    assert chart.read_bytes() == (out / "acc.png").read_bytes()


def test_tangos_own_wandb_log_does_not_import_beside_todays_wandb():
    """Tango 1.3.2's ``wandb::log`` callback needs wandb<0.14.3 (and the ``retry`` package): with
    the wandb this project installs it fails on import, as the README says. Ours replaces it."""
    with pytest.raises((ImportError, AttributeError)):
        import tango.integrations.wandb  # noqa: F401


def tensorboard_series(run_dir: Path, name: str):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    return [[e.step, e.value] for e in events.Scalars(name)]


@pytest.mark.fault
def test_a_killed_and_resumed_fine_tune_continues_its_wandb_run(tracked, tmp_path, monkeypatch):
    task, _, _, reference, _ = tracked
    offline_environment(monkeypatch)
    workspace, board = LocalWorkspace(tmp_path / "ws"), tmp_path / "tensorboard"
    with pytest.raises(Exception, match="interrupted at step 3"):
        finetune(task, callbacks=[Lazy(FailAt, at=3)], tensorboard_dir=str(board), **TRACKED).result(workspace)
    step = finetune(task, tensorboard_dir=str(board), **TRACKED)
    result = step.result(workspace)  # resumes from the checkpoint of step 2
    closed_wandb()
    history = result.training_metrics["history"]
    assert history == reference.training_metrics["history"]
    killed, resumed = offline_runs(workspace.work_dir(step) / "wandb")
    assert killed.run_id == resumed.run_id and killed.exit_code == 1 and resumed.exit_code == 0
    assert [s for s, _ in killed.series("train/loss")] == [1, 2, 3]  # step 3 was logged, not checkpointed
    assert [s for s, _ in resumed.series("train/loss")] == [3, 4]  # the curve goes on from the checkpoint
    assert killed.series("train/loss")[:2] + resumed.series("train/loss") == history["loss"]
    # TensorBoard: what the killed run wrote after the checkpoint is purged, one curve remains.
    (run_dir,) = board.iterdir()
    assert [s for s, _ in tensorboard_series(run_dir, "train/loss")] == [1, 2, 3, 4]


@pytest.mark.ddp
@pytest.mark.full
def test_two_workers_make_one_wandb_run(tracked, tmp_path, monkeypatch):
    task, _, _, reference, _ = tracked
    offline_environment(monkeypatch)
    step = finetune(task, device_count=2, device="cpu", **TRACKED)
    workspace = LocalWorkspace(tmp_path / "ws")
    result = step.result(workspace)
    (run,) = offline_runs(workspace.work_dir(step) / "wandb")
    assert run.config["world_size"] == 2
    assert run.series("train/loss") == result.training_metrics["history"]["loss"]
    assert [v for _, v in run.series("train/loss")] == pytest.approx(
        [v for _, v in reference.training_metrics["history"]["loss"]], rel=1e-4)


def test_generative_fine_tuning_is_tracked(tmp_path, monkeypatch):
    """A generative fine-tune (answers, not choices) logs its tokens/s and its validations, by
    loss and by exact match, as a multiple-choice one logs its own."""
    from catwalk_steps.tasks import GenerationTask

    offline_environment(monkeypatch)
    generation = TINY / "generation"
    task = GenerationTask(data_files={s: str(generation / f"{s}.jsonl") for s in ("train", "validation")},
                          until=["\n"], max_new_tokens=8)
    step = finetune(task, tensorboard_dir=str(tmp_path / "tb"), val_metric="exact_match", **TRACKED)
    workspace = LocalWorkspace(tmp_path / "ws")
    result = step.result(workspace)
    closed_wandb()
    (run_dir,) = (tmp_path / "tb").iterdir()
    assert all(value > 0 for _, value in tensorboard_series(run_dir, "train/tokens_per_s"))
    validations = result.training_metrics["history"]["validations"]
    for name in ("val/loss", "val/exact_match"):
        assert [s for s, _ in tensorboard_series(run_dir, name)] == [v["step"] for v in validations], name
    (run,) = offline_runs(workspace.work_dir(step) / "wandb")
    assert run.series("train/tokens_per_s") and run.summary["best/exact_match"] == result.training_metrics[
        "val_exact_match"]
