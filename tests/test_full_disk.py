"""Storage: every writer publishes through ``storage.atomic``; a full disk fails a step with one
line, leaves no cache entry, and the run after space is freed resumes to an uninterrupted run's
result; fine-tuning checks before it starts that its filesystem has room."""

import errno
import logging
import os
import sqlite3
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from sqlitedict import SqliteDict
from tango import Step
from tango.common.params import Params
from tango.workspaces import LocalWorkspace

from catwalk_steps import (
    CalculateMetricsStep, ExportPredictionsStep, FinetuneStep, PiqaTask, PredictStep, TabulateMetricsStep,
)
from catwalk_steps.models import finetuned as finetuned_module
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import files as weights_module
from catwalk_steps.storage import atomic
from catwalk_steps.storage.atomic import AtomicJsonFormat
from catwalk_steps.storage import journal as journal_module
from catwalk_steps.storage.journal import Journal
from catwalk_steps.storage.space import DiskFullError, NotEnoughSpaceError, disk_bytes, is_disk_full
from catwalk_steps.training import loop
from catwalk_steps.training.checkpoints import CheckpointStore
from catwalk_steps.training.preflight import disk_needs

from .conftest import TINY, TINY_MODEL

pytestmark = pytest.mark.fault
# 4 steps, a checkpoint every 2: the second one is written while the first is kept.
TRAINING = dict(model=TINY_MODEL, batch_size=16, train_limit=32, validation_limit=16, train_epochs=2,
                validate_every=2, learning_rate=1e-3, step_name="finetune")
# Tango's records and locks (and the locks of tango_fixes/wait_for_running_step.py): not results.
TANGOS_OWN = {"cache-metadata.json", "lock", "stepinfo.sqlite", "settings.json"}
NOT_RESULTS = {"runs", "catwalk-locks"}


def finetune(task, **overrides) -> FinetuneStep:
    return FinetuneStep(tasks=[task], **{**TRAINING, **overrides})


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Every path published (file or directory) while a whole pipeline ran (fine-tune, keeping
    its checkpoints; predict, keeping its journals; metrics; table; export with charts), with the
    bytes the fine-tuning's work dir held at each publish (before older checkpoints go)."""
    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    root = tmp_path_factory.mktemp("published")
    workspace = LocalWorkspace(root / "ws")
    record, commit = [], atomic._commit
    finetuning = finetune(task, keep_checkpoints=True, validate_every=1)  # 4 checkpoints
    work_dir = workspace.work_dir(finetuning)

    def recording(temp: Path, path: Path) -> None:
        record.append((path, disk_bytes(work_dir)))
        commit(temp, path)

    patch = pytest.MonkeyPatch()
    patch.setattr(atomic, "_commit", recording)
    patch.setattr(PredictStep, "clean_work_dir", lambda self, work_dir: None)  # keep the journals
    try:
        model = finetuning.result(workspace)
        predict = PredictStep(model=model, task=task, limit=4, max_batch_size=2, step_name="predict")
        metrics = CalculateMetricsStep(predictions=predict, step_name="metrics")
        table = TabulateMetricsStep(metrics={"piqa/tiny": metrics}, step_name="table")
        out = root / "out"
        export = ExportPredictionsStep(output_dir=str(out), predictions={"piqa/tiny": predict}, table=table,
                                       chart="acc", training={"piqa/tiny": finetuning}, step_name="export")
        export.result(workspace)
    finally:
        patch.undo()
    return SimpleNamespace(paths=[p for p, _ in record], peak=max(b for _, b in record), workspace=root / "ws",
                           out=out, work_dir=work_dir, finetuning=finetuning, predict=predict, task=task)


def test_every_writer_publishes_through_storage(published):
    names = {p.name for p in published.paths}
    # checkpoints (directory, state, pointer), the result (directory, weights, record), the cache
    # entries (linked weights, model.json, predictions, metrics, table), journals, exports
    for name in ["step-0000002", "state.json", "latest.json", "result", "model.safetensors", "result.json",
                 "model.json", "data.json", "table.json", "table.md", "table.csv", "scores-0.jsonl",
                 "piqa_tiny.jsonl", "metrics.csv", "metrics.md", "acc.png", "training.png"]:
        assert name in names, name
    # ... and nothing reached the disk otherwise (Tango's own records aside).
    for root in (published.workspace, published.out):
        for path in root.rglob("*"):
            if path.is_dir() or path.name in TANGOS_OWN or NOT_RESULTS & set(path.relative_to(root).parts):
                continue
            assert any(p == path or p in path.parents for p in published.paths), f"{path} was not published"


def test_journal_appends_are_on_disk_when_append_returns(tmp_path, monkeypatch):
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), fsync(fd)))
    journal = Journal(tmp_path / "scores-0.jsonl", "work")
    journal.load()
    synced.clear()
    journal.append([(0, -1.5)])
    assert synced == [str(tmp_path / "scores-0.jsonl")]


def test_a_full_disk_is_one_line_naming_the_path(tmp_path):
    from torch.distributed.checkpoint.api import CheckpointException

    wrapped = CheckpointException("save failed", {0: (OSError(errno.ENOSPC, "No space left on device"), None)})
    assert is_disk_full(wrapped) and not is_disk_full(OSError(errno.EACCES, "denied"))
    error = DiskFullError(tmp_path / "ckpt", needed=3 << 20)
    assert str(error).count("\n") == 0 and str(error).startswith(f"Disk full: cannot write {tmp_path / 'ckpt'} (")
    assert "about 3.0 MiB needed" in str(error) and error.errno == errno.ENOSPC


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")  # as the kernel says it: no path


def _failing_on(monkeypatch, owner, name, nth: int = 1, when=lambda *args, **kwargs: True) -> None:
    """``owner.name`` raises ENOSPC on its ``nth`` call for which ``when(*args)`` holds."""
    original, calls = getattr(owner, name), []

    def maybe_full(*args, **kwargs):
        if when(*args, **kwargs):
            calls.append(args)
            if len(calls) == nth:
                _enospc()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, maybe_full)


def _writing(file_name: str):
    return lambda path, *args, **kwargs: Path(path).name == f".{file_name}.tmp"


# (what fills the disk, the path the message names, where the rerun starts)
TRAINING_SITES = {
    "checkpoint shards": (lambda mp: _failing_on(mp, torch.distributed.checkpoint, "save", nth=2),
                          "checkpoints/step-0000004", 2),
    "checkpoint state": (lambda mp: _failing_on(mp, Path, "write_bytes", 2, _writing("state.json")),
                         "state.json", 2),
    "latest pointer": (lambda mp: _failing_on(mp, Path, "write_bytes", 2, _writing("latest.json")),
                       "latest.json", 2),
    "result weights": (lambda mp: _failing_on(mp, weights_module, "save_file"), "model.safetensors", 4),
    "result record": (lambda mp: _failing_on(mp, Path, "write_bytes", 1, _writing("result.json")),
                      "result.json", 4),
    "cache entry weights": (lambda mp: _failing_on(mp, finetuned_module, "_link_or_copy"), "model.safetensors", None),
    "cache entry record": (lambda mp: _failing_on(mp, Path, "write_bytes", 1, _writing("model.json")),
                           "model.json", None),
    "tango's cache-metadata.json": (lambda mp: _failing_on(mp, Params, "to_file"), "cache-metadata", None),
}
DEFAULT_SITES = set()  # the default run fills a real filesystem instead, and checks Tango's write below


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, published):
    return finetune(published.task).result(LocalWorkspace(tmp_path_factory.mktemp("clean"))).fingerprint


@pytest.mark.parametrize("site", [
    pytest.param(site, marks=() if site in DEFAULT_SITES else pytest.mark.full) for site in TRAINING_SITES
])
def test_training_on_a_full_disk_fails_in_one_line_and_resumes_to_the_same_weights(
    site, published, uninterrupted, tmp_path, monkeypatch, caplog,
):
    fill, named, resumes_at = TRAINING_SITES[site]
    fill(monkeypatch)
    step = finetune(published.task)
    with pytest.raises(OSError) as error:
        step.result(LocalWorkspace(tmp_path))
    message = str(error.value)
    assert error.value.errno == errno.ENOSPC and "\n" not in message and named in message, message
    assert message.startswith("Disk full: cannot write") or "No space left on device" in message
    assert not list(tmp_path.glob("cache/*/cache-metadata.json"))  # no entry marked complete
    monkeypatch.undo()  # space is freed

    workspace = LocalWorkspace(tmp_path)
    assert step not in workspace.step_cache
    with caplog.at_level(logging.INFO):
        again = finetune(published.task).result(workspace)
    if resumes_at is not None:
        assert f"Resuming from the checkpoint of step {resumes_at}" in caplog.text
    else:  # training had ended: its result is cached, not trained again
        assert "Training had ended; its result is taken from" in caplog.text
    assert again.fingerprint == uninterrupted  # bit-equal on one worker


def test_prediction_on_a_full_disk_resumes_from_its_journal(published, tmp_path, monkeypatch):
    cached = LocalWorkspace(published.workspace).step_cache
    settings = dict(model=cached[published.finetuning], task=published.task, limit=4, max_batch_size=2,
                    step_name="predict")
    expected = cached[published.predict]
    appends = []

    def open_full_on_the_third_append(path, mode="r", *args, **kwargs):
        if mode == "ab":
            appends.append(path)
            if len(appends) == 3:  # two batches are journaled
                _enospc()
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(journal_module, "open", open_full_on_the_third_append, raising=False)
    with pytest.raises(DiskFullError, match=r"^Disk full: cannot write .*scores-0\.jsonl"):
        PredictStep(**settings).result(LocalWorkspace(tmp_path / "ws"))
    monkeypatch.undo()
    (journal,) = (tmp_path / "ws").glob("cache/*/work/scores-0.jsonl")
    assert len(journal.read_text().splitlines()) == 1 + 4  # the header, two batches of two queries
    resumed = []
    monkeypatch.setattr(Journal, "load", lambda self, load=Journal.load: resumed.append(load(self)) or resumed[-1])
    assert PredictStep(**settings).result(LocalWorkspace(tmp_path / "ws")) == expected
    assert len(resumed[0]) == 4  # two batches of two queries, read back, not scored again


@Step.register("test_full_disk::constant")
class ConstantStep(Step):
    FORMAT = AtomicJsonFormat()

    def run(self, value: int) -> dict:  # type: ignore[override]
        return {"value": value}


def test_tangos_cache_write_on_a_full_disk(tmp_path, monkeypatch):
    """The fix in ``tango_fixes/durable_cache_entries.py``."""
    workspace, step = LocalWorkspace(tmp_path), ConstantStep(value=1, step_name="constant")
    # The rename of cache-metadata.json fails after Tango put the value in its memory.
    monkeypatch.setattr(Path, "rename", _enospc)
    with pytest.raises(OSError):
        step.result(workspace)
    monkeypatch.undo()
    assert step not in workspace.step_cache  # not even in this process's memory

    # Recording the failure fails too (SQLite on the same full disk): the step's own error is raised.
    def sqlite_full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    def full_everywhere(self, artifact, dir):
        monkeypatch.setattr("sqlitedict.SqliteDict.commit", sqlite_full)
        atomic.publish_file(Path(dir) / "data.json", _enospc)

    monkeypatch.setattr(AtomicJsonFormat, "write", full_everywhere)
    with pytest.raises(DiskFullError, match="data.json"):
        ConstantStep(value=2, step_name="constant").result(workspace)
    monkeypatch.undo()

    # Entries are on disk before the record says complete: the file, then its directory, fsynced.
    synced, fsync, commit = [], os.fsync, SqliteDict.commit
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), fsync(fd)))
    monkeypatch.setattr(SqliteDict, "commit", lambda self, *args: (synced.append("commit"), commit(self, *args)))
    assert ConstantStep(value=2, step_name="constant").result(LocalWorkspace(tmp_path)) == {"value": 2}
    entry = LocalWorkspace(tmp_path).step_dir(ConstantStep(value=2, step_name="constant"))
    recorded = len(synced) - 1 - synced[::-1].index("commit")  # step_finished's record
    assert synced[recorded - 2:recorded] == [str(entry / "cache-metadata.json"), str(entry)]


def _mounted_tmpfs(path: Path, size: str) -> Path:
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root; the injected-ENOSPC tests cover the same sites")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the injected-ENOSPC tests cover "
                    "the same sites")
    return path


@pytest.fixture
def small_disk(tmp_path):
    disk = _mounted_tmpfs(tmp_path / "disk", "8m")
    yield disk
    subprocess.run(["umount", "--lazy", str(disk)], check=True)  # (SQLite's thread may hold a file)


def test_a_real_full_filesystem_fails_the_checkpoint_and_the_run_after_resumes(
    small_disk, published, uninterrupted, monkeypatch, caplog,
):
    save, filler = CheckpointStore.save, small_disk / "filler"

    def save_then_fill_the_disk(self, *args, **kwargs):
        save(self, *args, **kwargs)
        if not filler.exists():  # after the first checkpoint: 64 KiB left
            with open(filler, "wb") as f:
                f.write(b"\0" * (os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize - (64 << 10)))

    monkeypatch.setattr(CheckpointStore, "save", save_then_fill_the_disk)
    with pytest.raises(DiskFullError) as error:
        finetune(published.task).result(LocalWorkspace(small_disk / "ws"))
    assert str(error.value).startswith(f"Disk full: cannot write {small_disk / 'ws'}")
    assert "checkpoints/step-0000004" in str(error.value), str(error.value)
    assert not list(small_disk.glob("ws/cache/*/cache-metadata.json"))
    monkeypatch.undo()
    filler.unlink()  # space is freed
    with caplog.at_level(logging.INFO):
        resumed = finetune(published.task).result(LocalWorkspace(small_disk / "ws"))
    assert "Resuming from the checkpoint of step 2" in caplog.text
    assert resumed.fingerprint == uninterrupted


def test_a_run_that_cannot_fit_fails_before_loading_the_model(tmp_path, published, monkeypatch):
    disk = _mounted_tmpfs(tmp_path / "disk", "2m")
    try:
        monkeypatch.setattr(loop, "train_worker", lambda *args: pytest.fail("trained"))
        with pytest.raises(NotEnoughSpaceError) as error:
            finetune(published.task, train_epochs=4).result(LocalWorkspace(disk / "ws"))
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)  # (SQLite's thread may hold a file)
    message = str(error.value)
    assert message.startswith("Not enough disk space: fine-tuning") and "135,488 trainable parameters" in message
    assert "MiB free. Free " in message and "tango run -w DIR" in message and "\n" not in message


def test_the_estimate_is_within_2x_of_the_bytes_really_written(published):
    """On the demo's model: the checkpoint and result files on disk, and the most bytes the work
    dir held at once (sampled at every publish, when the new checkpoint sits beside the kept
    ones)."""
    job = SimpleNamespace(spec=ModelSpec.parse(TINY_MODEL), adapter=None, optimizer=None, learning_rate=1e-3,
                          weight_decay=0.0, decay_biases_and_norms=False, train_steps=4, validate_every=1)
    needs = disk_needs(job, world_size=1)
    checkpoint = disk_bytes(published.work_dir / "checkpoints" / "step-0000004")
    entry = LocalWorkspace(published.workspace).step_dir(published.finetuning)
    result = (entry / "model.safetensors").stat().st_size
    assert checkpoint <= needs.checkpoint * 1.1 and needs.checkpoint <= 2 * checkpoint
    assert result <= needs.result * 1.1 and needs.result <= 2 * result
    assert published.peak <= needs.peak <= 2 * published.peak


def test_the_estimate_of_a_300m_model_is_within_2x_of_its_real_bytes(tmp_path):
    """A ~300M-parameter GPT-2 shape, from its config alone: the parameters counted from the
    architecture by hand, float32; a checkpoint holds them, AdamW's two moments of each, and the
    tied output layer under its second name (as DCP writes it). The bytes of a real checkpoint
    and result of this shape: ``test_a_real_300m_checkpoint_matches_the_estimate`` (``--full``)."""
    from transformers import GPT2Config

    config = GPT2Config(n_embd=1024, n_layer=20, n_head=16)
    config.save_pretrained(tmp_path)
    job = SimpleNamespace(spec=ModelSpec.parse(f"rc::{tmp_path}"), adapter=None, optimizer=None, learning_rate=1e-3,
                          weight_decay=0.01, decay_biases_and_norms=False, train_steps=1000, validate_every=100)
    needs = disk_needs(job, world_size=1)
    d, layers, embeddings = config.n_embd, config.n_layer, (config.vocab_size + config.n_positions) * config.n_embd
    parameters = embeddings + layers * (12 * d * d + 13 * d) + 2 * d  # blocks: attention, MLP, two norms
    assert needs.parameters == parameters and 290e6 < parameters < 310e6
    # float32 weights (the tied output layer under its second name too) and AdamW's two moments
    real_result, real_checkpoint = 4 * parameters, 4 * (parameters + config.vocab_size * d) + 2 * 4 * parameters
    assert real_result <= needs.result <= 1.01 * real_result
    assert real_checkpoint <= needs.checkpoint <= 1.01 * real_checkpoint
    assert needs.peak == 3 * needs.checkpoint <= 2 * (2 * real_checkpoint + real_result)  # vs latest == best


@pytest.mark.full
def test_a_real_300m_checkpoint_matches_the_estimate(tmp_path):
    """The same ~300M shape, with real (random) weights and AdamW state: the bytes on disk of a
    checkpoint written by :class:`CheckpointStore` and of a result written by
    :func:`save_weights`, against the estimate. Needs ~6 GB of memory and ~5 GB of disk."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from catwalk_steps.models.weights import save_weights
    from catwalk_steps.training.checkpoints import Progress
    from catwalk_steps.training.optimizers import build_optimizer

    GPT2Config(n_embd=1024, n_layer=20, n_head=16).save_pretrained(tmp_path / "config")
    spec = ModelSpec.parse(f"rc::{tmp_path / 'config'}")
    job = SimpleNamespace(spec=spec, adapter=None, optimizer=None, learning_rate=1e-3, weight_decay=0.0,
                          decay_biases_and_norms=False, train_steps=1000, validate_every=100)
    needs = disk_needs(job, world_size=1)
    model = GPT2LMHeadModel(spec.load_config())
    optimizer = build_optimizer(model, None, 1e-3, 0.0)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    store = CheckpointStore(tmp_path / "checkpoints")
    store.save(model, optimizer, {}, Progress(step=1), rank=0, world_size=1)
    checkpoint = disk_bytes(store.path(1))
    del optimizer
    save_weights(model.state_dict(), tmp_path / "model.safetensors")
    result = (tmp_path / "model.safetensors").stat().st_size
    print(f"300M shape: checkpoint {checkpoint} bytes (estimate {needs.checkpoint}), "
          f"result {result} bytes (estimate {needs.result})")
    assert checkpoint / 2 <= needs.checkpoint <= 2 * checkpoint and abs(needs.checkpoint / checkpoint - 1) < 0.01
    assert result / 2 <= needs.result <= 2 * result and abs(needs.result / result - 1) < 0.01
