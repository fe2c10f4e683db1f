import os

import pytest
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.integrations.torch import TrainCallback
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetunedModel, FinetuneStep, PredictStep
from catwalk_steps.models.weights import load_pretrained

from .conftest import NO_DROPOUT, TINY_MODEL

TRAINING = dict(
    model=TINY_MODEL,
    batch_size=16,
    train_epochs=3,
    learning_rate=1e-3,
    config_overrides=NO_DROPOUT,
)


def finetune_step(task, device_count: int, **overrides) -> FinetuneStep:
    return FinetuneStep(tasks=[task], device_count=device_count, step_name="finetune", **{**TRAINING, **overrides})


@pytest.fixture(scope="module")
def single(tmp_path_factory, request):
    """One single-process fine-tuning run, shared by the tests below."""
    from catwalk_steps import PiqaTask
    from .conftest import TINY

    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    workspace = LocalWorkspace(tmp_path_factory.mktemp("single"))
    step = finetune_step(task, device_count=1)
    return task, workspace, step, step.result(workspace)


def test_result_is_a_cpu_state_dict_that_loads_strictly(single):
    _, workspace, step, result = single
    assert isinstance(result, FinetunedModel)
    assert all(t.device.type == "cpu" for t in result.state_dict.values())
    cached = LocalWorkspace(workspace.dir).step_cache[step]  # a fresh workspace reads from disk
    assert cached is not result
    fresh = load_pretrained(cached.spec)
    fresh.load_state_dict(cached.state_dict, strict=True)
    assert result.training_metrics["val_acc"] > 0.6


def test_predictions_from_training_and_from_cache_are_identical(single):
    task, workspace, step, from_training = single
    from_cache = LocalWorkspace(workspace.dir).step_cache[step]
    predict = PredictStep(model=step, task=task, step_name="predict")
    assert predict.run(model=from_cache, task=task) == predict.run(model=from_training, task=task)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(batch_size=15, device_count=2), "batch_size=15 makes 1 micro-batch\\(es\\) of 15, which device_count=2"),
        (dict(batch_size=16, micro_batch_size=8, device_count=2, validate_every=0), "validate_every must be at least 1"),
        (dict(micro_batch_size=5), "micro_batch_size=5 must be a positive divisor of batch_size=16"),
        (dict(grad_accum=2), "grad_accum was replaced by micro_batch_size"),
        (dict(device="cpu", device_count=len(os.sched_getaffinity(0)) + 1, batch_size=len(os.sched_getaffinity(0)) + 1,
              micro_batch_size=1), "CPU workers, but only"),
        (dict(device_count=0), "device_count must be at least 1"),
        (dict(batch_size=0), "batch_size must be at least 1"),
        (dict(learning_rate=-1.0), "learning_rate must be positive"),
        (dict(device="tpu"), "Unknown device 'tpu'"),
        (dict(device="cuda:1", device_count=2), "names one device, but device_count=2"),
        (dict(model="gpt2"), "Unknown model spec 'gpt2'"),
        (dict(train_limit=8), "8 training instances make no batch of 16"),
    ],
)
def test_bad_settings_fail_before_training(tiny_task, workspace, overrides, message):
    settings = {**TRAINING, "device_count": 1, **overrides}
    with pytest.raises(ConfigurationError, match=message):
        FinetuneStep(tasks=[tiny_task], step_name="finetune", **settings).result(workspace)


class RecordingCallback(TrainCallback):
    """Writes what it saw into the step's work dir."""

    def post_val_loop(self, step: int, epoch: int, val_metric: float, best_val_metric: float) -> None:
        with open(self.work_dir / "seen.txt", "a") as f:
            f.write(f"{step} {val_metric}\n")


def test_callbacks_observe_training_without_changing_the_key(tiny_task, workspace):
    plain = FinetuneStep(tasks=[tiny_task], step_name="finetune", **{**TRAINING, "train_epochs": 1, "train_limit": 32})
    observed = FinetuneStep(
        tasks=[tiny_task], step_name="finetune", callbacks=[Lazy(RecordingCallback)],
        **{**TRAINING, "train_epochs": 1, "train_limit": 32},
    )
    assert observed.unique_id == plain.unique_id
    result = observed.result(workspace)
    seen = (workspace.work_dir(observed) / "seen.txt").read_text().split()
    assert seen == ["1", str(result.training_metrics["val_acc"])]


def test_every_run_parameter_is_a_documented_setting_of_its_type():
    """``run()``'s signature (which Tango reads) and :class:`FinetuneSettings` (which documents it)
    name the same settings, with the same types, and each has its documentation."""
    import ast
    import inspect
    import typing

    from catwalk_steps.training.settings import FinetuneSettings

    parameters = dict(inspect.signature(FinetuneStep.run).parameters)
    del parameters["self"]
    hints = typing.get_type_hints(FinetuneStep.run)
    assert typing.get_type_hints(FinetuneSettings) == {name: hints[name] for name in parameters}
    body = ast.parse(inspect.getsource(FinetuneSettings)).body[0].body
    documented = {
        field.target.id for field, doc in zip(body, body[1:])
        if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
    }
    assert documented == set(parameters)
