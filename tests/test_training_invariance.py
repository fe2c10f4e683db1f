"""The promise of FinetuneStep: its result does not depend on how it was computed.

A matrix over device_count {1, 2} x micro-batching {accumulating, one micro-batch per device}
x train size {divisible by the batch, not} x dropout {off, on}: 1 and 2 workers share one cache
key and must give the same model (weights within WEIGHT_TOLERANCE, equal validation accuracy),
and the validation accuracy FinetuneStep reports must be the one PredictStep +
CalculateMetricsStep compute with the returned weights. Then runs interrupted after a
checkpoint and resumed on another device count. Both with the default optimizer and schedule
(AdamW, linear warm-up) and with Tango's ``torch::SGD`` (momentum) + ``torch::StepLR``.
"""

import json

import pytest
from tango.common.lazy import Lazy
from tango.integrations.torch import TrainCallback
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, FinetuneStep, PredictStep

from .conftest import NO_DROPOUT, TINY_MODEL

pytestmark = pytest.mark.ddp

#: Largest weight difference allowed between runs that differ only in float summation order
#: (gradients summed over 1 or 2 workers). Measured: below 1e-5 on these runs.
WEIGHT_TOLERANCE = 1e-4
BATCH = 8
VALIDATION = 24
#: A non-default optimizer and schedule, as a config gives them.
SGD_STEP_LR = dict(
    optimizer={"type": "torch::SGD", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01},
    lr_scheduler={"type": "torch::StepLR", "step_size": 3, "gamma": 0.5},
)
OPTIMIZERS = {"default": {}, "sgd-steplr": SGD_STEP_LR}


def finetune(task, device_count: int, train_size: int, micro_batch_size: int, dropout: bool, **extra) -> FinetuneStep:
    if "optimizer" not in extra:
        extra["learning_rate"] = 1e-3
    return FinetuneStep(
        model=TINY_MODEL, tasks=[task], batch_size=BATCH, micro_batch_size=micro_batch_size, train_epochs=2,
        train_limit=train_size, validation_limit=VALIDATION, validate_every=2,
        config_overrides={} if dropout else NO_DROPOUT, device_count=device_count, step_name="finetune",
        keep_checkpoints=True, **extra,
    )


def largest_difference(a, b) -> float:
    assert a.keys() == b.keys()
    return max((a[name] - b[name]).abs().max().item() for name in a)


def checkpoint_progress(workspace: LocalWorkspace, step: FinetuneStep):
    checkpoints = workspace.work_dir(step) / "checkpoints"
    latest = json.loads((checkpoints / "latest.json").read_text())["step"]
    return json.loads((checkpoints / f"step-{latest:07d}" / "state.json").read_text())["progress"]


#: The one matrix cell the default run keeps (the hardest: accumulating, a partial last batch,
#: dropout on); `--full` runs them all.
DEFAULT_CELL = "accumulating-not-divisible-dropout-on"
MATRIX = [
    pytest.param(micro, size, dropout, "default", id=cell, marks=() if cell == DEFAULT_CELL else pytest.mark.full)
    for micro, micro_id in [(2, "accumulating"), (4, "one-micro-batch-per-device")]
    for size, size_id in [(32, "divisible"), (37, "not-divisible")]
    for dropout, dropout_id in [(False, "dropout-off"), (True, "dropout-on")]
    for cell in [f"{micro_id}-{size_id}-{dropout_id}"]
] + [  # the hardest cases again, with SGD + StepLR (2-process runs are slow on 2 cores)
    pytest.param(2, 37, True, "sgd-steplr", id="accumulating-not-divisible-dropout-on-sgd-steplr",
                 marks=pytest.mark.full),
    pytest.param(4, 32, False, "sgd-steplr", id="one-micro-batch-per-device-divisible-dropout-off-sgd-steplr",
                 marks=pytest.mark.full),
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``trained(device_count, train_size, micro_batch_size, dropout, optimizer)``: that run's
    (step, workspace, result), fine-tuned once per module. The resume tests' uninterrupted
    reference and the dropout check's run without dropout are runs of the matrix."""
    from catwalk_steps import PiqaTask

    from .conftest import TINY

    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    runs = {}

    def train(device_count: int, train_size: int, micro_batch_size: int, dropout: bool, optimizer: str):
        key = (device_count, train_size, micro_batch_size, dropout, optimizer)
        if key not in runs:
            step = finetune(task, device_count, train_size, micro_batch_size, dropout, **OPTIMIZERS[optimizer])
            workspace = LocalWorkspace(tmp_path_factory.mktemp(f"ws{device_count}"))
            runs[key] = step, workspace, step.result(workspace)
        return runs[key]

    train.task = task
    return train


@pytest.mark.parametrize("micro_batch_size, train_size, dropout, optimizer", MATRIX)
def test_one_and_two_workers_give_the_same_model(trained, dropout, train_size, micro_batch_size, optimizer):
    results = {device_count: trained(device_count, train_size, micro_batch_size, dropout, optimizer)
               for device_count in (1, 2)}
    (one, ws_one, single), (two, _, double) = results[1], results[2]
    assert one.unique_id == two.unique_id

    worst = largest_difference(single.state_dict, double.state_dict)
    print(f"1 vs 2 workers: largest weight difference {worst:.1e}")
    assert worst < WEIGHT_TOLERANCE
    assert single.training_metrics["val_acc"] == double.training_metrics["val_acc"]
    assert single.training_metrics["step"] == double.training_metrics["step"]
    assert single.training_metrics["val_loss"] == pytest.approx(double.training_metrics["val_loss"], rel=1e-4)

    # Every epoch is train_size // BATCH whole steps; a validation and a checkpoint every 2 steps
    # and at the end; the result is the best of those validations, and it was checkpointed.
    steps = 2 * (train_size // BATCH)
    progress = checkpoint_progress(ws_one, one)
    assert progress["step"] == steps
    assert [v["step"] for v in progress["validations"]] == list(range(2, steps + 1, 2))
    best = max(progress["validations"], key=lambda v: (v["val_acc"], -v["val_loss"], -v["step"]))
    assert {k: single.training_metrics[k] for k in best} == best
    assert single.training_metrics["history"]["validations"] == [
        {k: v[k] for k in ("step", "val_acc", "val_loss")} for v in progress["validations"]]
    one_losses, two_losses = (r.training_metrics["history"]["loss"] for r in (single, double))
    assert [s for s, _ in one_losses] == [s for s, _ in two_losses]
    assert [v for _, v in one_losses] == pytest.approx([v for _, v in two_losses], rel=1e-4)

    # The reported validation accuracy is what evaluating the returned weights gives.
    for step, workspace, result in results.values():
        predictions = PredictStep(model=step, task=trained.task, limit=VALIDATION, step_name="predict")
        metrics = CalculateMetricsStep(predictions=predictions, step_name="metrics").result(workspace)
        assert metrics["acc"] == pytest.approx(result.training_metrics["val_acc"], abs=1e-6)  # float32 there


class Interrupt(TrainCallback):
    """Fails the run when it reaches step ``at`` (a checkpoint is written every 2 steps)."""

    def __init__(self, *args, at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at = at

    def pre_batch(self, step: int, epoch: int, batch) -> None:
        if step == self.at:
            raise RuntimeError(f"interrupted at step {step}")


class RecordStart(TrainCallback):
    """Writes the step a run starts from into the work dir."""

    def pre_train_loop(self) -> None:
        self.started = False

    def pre_epoch(self, step: int, epoch: int) -> None:
        if not self.started and self.train_config.worker_id == 0:
            (self.work_dir / "started_at").write_text(str(step))
        self.started = True


@pytest.fixture(scope="module", params=[pytest.param("default"), pytest.param("sgd-steplr", marks=pytest.mark.full)])
def uninterrupted(trained, request):
    _, _, result = trained(1, 37, 2, True, request.param)
    return trained.task, result, request.param


@pytest.mark.parametrize("first, then", [pytest.param(1, 1, marks=pytest.mark.full), (1, 2),
                                         pytest.param(2, 1, marks=pytest.mark.full)],
                         ids=["1->1", "1->2", "2->1"])
def test_interrupted_run_resumes_on_any_device_count(uninterrupted, tmp_path, first, then):
    task, reference, optimizer = uninterrupted
    settings = OPTIMIZERS[optimizer]
    workspace = LocalWorkspace(tmp_path / "ws")
    with pytest.raises(Exception, match="interrupted at step 5"):
        finetune(task, first, 37, 2, dropout=True, callbacks=[Lazy(Interrupt, at=5)], **settings).result(workspace)
    step = finetune(task, then, 37, 2, dropout=True, callbacks=[Lazy(RecordStart)], **settings)
    resumed = step.result(workspace)
    assert (workspace.work_dir(step) / "started_at").read_text() == "4"  # from the checkpoint of step 4

    worst = largest_difference(reference.state_dict, resumed.state_dict)
    print(f"interrupted on {first}, resumed on {then}: largest weight difference {worst:.1e}")
    if first == then == 1:  # the same computation, interrupted: bit for bit
        assert worst == 0.0
    assert worst < WEIGHT_TOLERANCE
    assert resumed.training_metrics["val_acc"] == reference.training_metrics["val_acc"]
    assert resumed.training_metrics["history"]["loss"] == pytest.approx(reference.training_metrics["history"]["loss"],
                                                                        rel=1e-4)


def test_dropout_is_really_on_in_these_runs(uninterrupted, trained):
    _, with_dropout, optimizer = uninterrupted
    _, _, without = trained(1, 37, 2, False, optimizer)
    assert largest_difference(with_dropout.state_dict, without.state_dict) > 1e-3
