"""A finished cache entry holds the result alone: fine-tuning's checkpoints and prediction's
journals go once the result is safely cached, and a run that dies before that loses nothing."""

from pathlib import Path

import pytest
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep, PredictStep

from .conftest import TINY_MODEL

TRAINING = dict(model=TINY_MODEL, batch_size=16, train_limit=64, validation_limit=32, train_epochs=2,
                validate_every=2, learning_rate=1e-3, step_name="finetune")


def disk_bytes(directory: Path) -> int:
    """Bytes on disk, each file counted once however many names it has (hard links)."""
    seen, total = set(), 0
    for path in directory.rglob("*"):
        if path.is_file() and (path.stat().st_ino not in seen):
            seen.add(path.stat().st_ino)
            total += path.stat().st_size
    return total


@pytest.mark.parametrize("adapter", [None, {"type": "lora", "r": 4}], ids=["full", "lora"])
def test_a_fine_tuned_entry_is_its_weights_and_little_else(tiny_task, tmp_path, adapter):
    workspace = LocalWorkspace(tmp_path)
    step = FinetuneStep(tasks=[tiny_task], adapter=adapter, **TRAINING)
    result = step.result(workspace)
    entry = workspace.step_dir(step)
    weights = (entry / "model.safetensors").stat().st_size
    assert not (workspace.work_dir(step) / "checkpoints").exists()
    assert not [p for p in workspace.work_dir(step).rglob("*") if p.is_file()]  # the work dir is empty
    # Beyond the weights: the entry's JSON (spec, settings, training history), a few KiB, which
    # for the demo's tiny LoRA adapter is not small beside its weights.
    assert disk_bytes(entry) <= 1.1 * weights or disk_bytes(entry) - weights <= 64 << 10
    if adapter is None:
        assert disk_bytes(entry) <= 1.1 * weights
    assert LocalWorkspace(tmp_path).step_cache[step].state_dict.keys() == result.state_dict.keys()


def test_keep_checkpoints_keeps_them_outside_the_key(tiny_task, tmp_path):
    workspace = LocalWorkspace(tmp_path)
    step = FinetuneStep(tasks=[tiny_task], keep_checkpoints=True, **TRAINING)
    assert step.unique_id == FinetuneStep(tasks=[tiny_task], **TRAINING).unique_id
    step.result(workspace)
    assert (workspace.work_dir(step) / "checkpoints" / "latest.json").exists()


def test_a_run_that_dies_after_training_before_caching_trains_no_more(tiny_task, tmp_path, monkeypatch):
    workspace = LocalWorkspace(tmp_path)
    step = FinetuneStep(tasks=[tiny_task], **TRAINING)

    def died(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed between training's end and the cache entry

    monkeypatch.setattr(type(step).FORMAT, "write", died)
    with pytest.raises(KeyboardInterrupt):
        step.result(workspace)
    monkeypatch.undo()
    from catwalk_steps.training import loop

    monkeypatch.setattr(loop, "train_worker", lambda *args: pytest.fail("trained again"))
    result = FinetuneStep(tasks=[tiny_task], **TRAINING).result(LocalWorkspace(tmp_path))
    assert result.training_metrics["val_acc"] > 0


def test_a_failed_cleaning_leaves_the_result_cached(tiny_task, tmp_path, monkeypatch):
    def fails(self, work_dir):
        raise PermissionError("read-only work dir")

    monkeypatch.setattr(FinetuneStep, "clean_work_dir", fails)
    workspace = LocalWorkspace(tmp_path)
    step = FinetuneStep(tasks=[tiny_task], **TRAINING)
    step.result(workspace)  # logged, and the result is cached all the same
    assert step in LocalWorkspace(tmp_path).step_cache


def test_prediction_journals_go_once_the_predictions_are_cached(tiny_task, tmp_path):
    workspace = LocalWorkspace(tmp_path)
    step = PredictStep(model=TINY_MODEL, task=tiny_task, limit=16, step_name="predict")
    step.result(workspace)
    assert not list(workspace.work_dir(step).glob("scores-*.jsonl"))
    assert len(LocalWorkspace(tmp_path).step_cache[step]) == 16
