"""A Tango user's training config carries over to FinetuneStep: optimizer and schedule
registrables, weight decay that skips biases and norms, early stopping, Tango's whole callback
contract, and the training curves in the result (single process; the 2-process matrices are in
test_training_invariance.py)."""

import json
import math
import shutil

import pytest
import torch
from tango.common import Params
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.integrations.torch import LRScheduler, Optimizer, StopEarly, TrainCallback
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep
from catwalk_steps.training.optimizers import CosineWithWarmup, LinearWithWarmup, build_schedule, parameter_groups

from .conftest import NO_DROPOUT, REPO, TINY_MODEL

SMALL = dict(
    model=TINY_MODEL, batch_size=8, micro_batch_size=4, train_epochs=1, train_limit=32, validation_limit=16,
    validate_every=2, config_overrides=NO_DROPOUT, keep_checkpoints=True,
)
#: What the code before optimizer/lr_scheduler existed gave for FinetuneStep(**SMALL,
#: learning_rate=1e-3) with dropout on (its key, and the best validation's loss): the default
#: must stay today's training.
TODAYS_KEY = "FinetuneStep-cw3-2DovsCrXxHusAanhUc5ccaddzbtg8sJ2"  # with the model as rc::data/tiny/model
TODAYS_VAL_LOSS = 0.978220272809267
SGD = {"type": "torch::SGD", "lr": 0.05, "momentum": 0.9}
STEP_LR = {"type": "torch::StepLR", "step_size": 2, "gamma": 0.5}


def step(task, **settings) -> FinetuneStep:
    """``config_overrides=None``: the model's own (dropout on)."""
    settings = {"model": SMALL["model"], "tasks": [task], **SMALL, **settings}  # the key hashes them in this order
    if settings["config_overrides"] is None:
        del settings["config_overrides"]
    return FinetuneStep(step_name="finetune", **settings)


def same_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_default_is_todays_adamw_with_linear_warmup(tiny_task, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # a relative model path: the key holds it, so it is the same in any clone
    default = step(tiny_task, model="rc::data/tiny/model", learning_rate=1e-3, config_overrides=None)
    assert default.unique_id == TODAYS_KEY
    result = default.result(LocalWorkspace(tmp_path / "a"))
    assert result.training_metrics["val_loss"] == pytest.approx(TODAYS_VAL_LOSS, rel=1e-6)
    # The same, spelled out as registrables: other keys, identical weights.
    explicit = step(
        tiny_task, config_overrides=None, optimizer={"type": "torch::AdamW", "lr": 1e-3, "weight_decay": 0.0},
        lr_scheduler={"type": "catwalk::linear_with_warmup", "warmup_fraction": 0.1},
    )
    assert explicit.unique_id != default.unique_id
    assert same_weights(explicit.result(LocalWorkspace(tmp_path / "b")).state_dict, result.state_dict)


def test_sgd_with_step_lr_is_its_own_model(tiny_task, tmp_path):
    default = step(tiny_task)
    sgd = step(tiny_task, optimizer=SGD, lr_scheduler=STEP_LR)
    assert len({default.unique_id, sgd.unique_id, step(tiny_task, optimizer=SGD).unique_id}) == 3
    # A config file gives Lazy objects; Python code may give the same dicts: one key.
    assert sgd.unique_id == step(tiny_task, optimizer=Lazy(Optimizer, Params(dict(SGD))),
                                 lr_scheduler=Lazy(LRScheduler, Params(dict(STEP_LR)))).unique_id
    trained = sgd.result(LocalWorkspace(tmp_path / "sgd"))
    assert not same_weights(trained.state_dict, default.result(LocalWorkspace(tmp_path / "default")).state_dict)
    assert trained.training_metrics["step"] in (2, 4)


def test_new_settings_left_at_their_defaults_keep_the_key(tiny_task):
    plain = step(tiny_task)
    assert step(tiny_task, optimizer=None, lr_scheduler=None, patience=None, decay_biases_and_norms=False).unique_id \
        == plain.unique_id
    assert step(tiny_task, patience=2).unique_id != plain.unique_id


def test_weight_decay_skips_biases_and_normalisation_weights():
    class LlamaRMSNorm(torch.nn.Module):  # as HF names its own norms
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.RMSNorm(4), LlamaRMSNorm(),
                                torch.nn.Embedding(3, 4))
    model[0].weight.requires_grad_(False)  # frozen: in no group
    decay, no_decay = parameter_groups(model)
    assert [p is model[4].weight for p in decay["params"]] == [True]
    assert {id(p) for p in no_decay["params"]} == {id(model[0].bias), id(model[1].weight), id(model[1].bias),
                                                    id(model[2].weight), id(model[3].weight)}
    assert no_decay["weight_decay"] == 0.0 and "weight_decay" not in decay  # the optimizer's own
    (everything,) = parameter_groups(model, decay_biases_and_norms=True)
    assert len(everything["params"]) == 6
    optimizer = Lazy(Optimizer, Params({"type": "torch::AdamW", "lr": 0.1, "weight_decay": 0.5})).construct(
        params=parameter_groups(model))
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.5, 0.0]


def test_schedules_get_the_number_of_steps_unless_given():
    def lrs(lazy, steps=10):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        schedule = build_schedule(lazy, optimizer, steps, 0)
        values = []
        for _ in range(steps):
            values.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            schedule.step()
        return schedule, values

    schedule, values = lrs(Lazy(LRScheduler, Params({"type": "catwalk::cosine_with_warmup", "warmup_steps": 2})))
    assert isinstance(schedule, CosineWithWarmup) and schedule.num_training_steps == 10
    expected = [0.0, 0.5] + [0.5 * (1 + math.cos(math.pi * (s - 2) / 8)) for s in range(2, 10)]
    assert values == pytest.approx(expected)
    schedule, _ = lrs(Lazy(LRScheduler, Params({"type": "catwalk::linear_with_warmup", "num_training_steps": 20})))
    assert isinstance(schedule, LinearWithWarmup) and schedule.num_training_steps == 20  # the config's own
    _, values = lrs(Lazy(LRScheduler, Params({"type": "torch::StepLR", "step_size": 3})))  # takes none
    assert values == pytest.approx([1.0] * 3 + [0.1] * 3 + [0.01] * 3 + [0.001])
    _, values = lrs(Lazy(LRScheduler, Params({"type": "catwalk::cosine_with_warmup", "min_lr_ratio": 0.1})))
    assert values[0] == 1.0 and min(values) > 0.1


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(optimizer=SGD, learning_rate=1e-3), "learning_rate sets the default optimizer"),
        (dict(optimizer=SGD, weight_decay=0.1), "weight_decay sets the default optimizer"),
        (dict(lr_scheduler=STEP_LR, warmup_fraction=0.2), "warmup_fraction sets the default lr_scheduler"),
        (dict(lr_scheduler={"type": "torch::ReduceLROnPlateau"}), "steps on a metric"),
        (dict(patience=0), "patience must be at least 1"),
        (dict(patience=2, validation_split=None), "patience needs a validation_split"),
        (dict(callbacks=[Lazy(TrainCallback, Params({"type": "torch::stop_early", "patience": 2}))]),
         "set `patience: N` on the step instead"),
    ],
)
def test_bad_settings_fail_when_the_step_is_built(tiny_task, settings, message):
    with pytest.raises(ConfigurationError, match=message):
        step(tiny_task, **settings)


class Recording(TrainCallback):
    """Writes every call it gets (worker 0) into ``calls.jsonl`` in the work dir; its state is
    the number of optimizer steps it saw, saved with checkpoints."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.steps_seen = 0

    def _write(self, *record) -> None:
        if self.train_config.worker_id == 0:
            with open(self.work_dir / "calls.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")

    def state_dict(self):
        return {"steps_seen": self.steps_seen}

    def load_state_dict(self, state) -> None:
        self.steps_seen = state["steps_seen"]
        self._write("load_state_dict", state)

    def pre_train_loop(self):
        self._write("pre_train_loop")

    def pre_epoch(self, step, epoch):
        self._write("pre_epoch", step, epoch)

    def post_epoch(self, step, epoch):
        self._write("post_epoch", step, epoch)

    def pre_batch(self, step, epoch, batch):
        assert isinstance(batch, list) and all(isinstance(micro, dict) for micro in batch)
        self._write("pre_batch", step, epoch, len(batch))

    def post_batch(self, step, epoch, batch_loss, batch_outputs):
        self.steps_seen += 1
        assert isinstance(batch_loss, float) and all("loss" in o and not o["loss"].requires_grad for o in batch_outputs)
        self._write("post_batch", step, epoch, len(batch_outputs))

    def log_batch(self, step, epoch, batch_loss, batch_outputs):
        self._write("log_batch", step, epoch)

    def pre_val_batch(self, step, val_step, epoch, val_batch):
        self._write("pre_val_batch", step, val_step, epoch)

    def post_val_batch(self, step, val_step, epoch, val_batch_outputs):
        assert "correct" in val_batch_outputs
        self._write("post_val_batch", step, val_step, epoch)

    def post_val_loop(self, step, epoch, val_metric, best_val_metric):
        self._write("post_val_loop", step, epoch)

    def post_train_loop(self, step, epoch):
        self._write("post_train_loop", step, epoch)


TrainCallback.register("test::recording", exist_ok=True)(Recording)


class FailAt(TrainCallback):
    def __init__(self, *args, at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at = at

    def pre_batch(self, step, epoch, batch) -> None:
        if step == self.at:
            raise RuntimeError(f"interrupted at step {step}")


def calls(workspace, finetune):
    return [tuple(json.loads(line)) for line in (workspace.work_dir(finetune) / "calls.jsonl").open()]


def test_callbacks_get_tangos_whole_contract_and_their_state_back_on_resume(tiny_task, tmp_path):
    workspace = LocalWorkspace(tmp_path)
    recording = Lazy(TrainCallback, Params({"type": "test::recording"}))
    # 32 examples, batches of 8 in 2 micro-batches: 4 steps; validations (16 instances, 4 batches) at 2 and 4.
    with pytest.raises(Exception, match="interrupted at step 3"):
        step(tiny_task, log_every=3, callbacks=[recording, Lazy(FailAt, at=3)]).result(workspace)
    finetune = step(tiny_task, log_every=3, callbacks=[recording])
    first = calls(workspace, finetune)
    assert first[:5] == [("pre_train_loop",), ("pre_epoch", 0, 0), ("pre_batch", 0, 0, 2), ("post_batch", 0, 0, 2),
                         ("pre_batch", 1, 0, 2)]
    validation = [("pre_val_batch", 1, n, 0) if k == 0 else ("post_val_batch", 1, n, 0) for n in range(4) for k in (0, 1)]
    assert first[6:] == [("log_batch", 1, 0)] + validation + [("post_val_loop", 1, 0), ("pre_batch", 2, 0, 2),
                                                             ("post_batch", 2, 0, 2), ("log_batch", 2, 0),
                                                             ("pre_batch", 3, 0, 2)]
    (workspace.work_dir(finetune) / "calls.jsonl").unlink()
    finetune.result(workspace)  # resumes from the checkpoint of step 2
    resumed = calls(workspace, finetune)
    assert resumed[0] == ("load_state_dict", {"steps_seen": 2})  # what the callback had at step 2
    assert resumed[1:3] == [("pre_train_loop",), ("pre_epoch", 2, 0)]
    assert ("post_val_loop", 3, 0) in resumed and resumed[-2:] == [("post_epoch", 3, 0), ("post_train_loop", 3, 0)]
    state = json.loads((workspace.work_dir(finetune) / "checkpoints" / "step-0000004" / "state.json").read_text())
    assert state["training_state"]["callbacks"] == [{"steps_seen": 4}]


class RaisesStopEarly(TrainCallback):
    def post_val_loop(self, step, epoch, val_metric, best_val_metric) -> None:
        raise StopEarly()


def test_a_callback_that_stops_training_is_an_error_pointing_to_patience(tiny_task, tmp_path):
    with pytest.raises(ConfigurationError, match="RaisesStopEarly stops training early.*set `patience: N`"):
        step(tiny_task, callbacks=[Lazy(RaisesStopEarly)]).result(LocalWorkspace(tmp_path))


def test_early_stopping_keeps_the_best_weights_and_a_stopped_run_resumes_as_stopped(tiny_task, tmp_path):
    workspace = LocalWorkspace(tmp_path)
    settings = dict(train_epochs=4, validate_every=1, learning_rate=3e-3, patience=2)
    finetune = step(tiny_task, **settings)
    result = finetune.result(workspace)
    metrics = result.training_metrics
    validations = metrics["history"]["validations"]
    assert "stopped_at" in metrics, "this run is expected to stop early (16 steps, patience 2)"
    accuracies = [v["val_acc"] for v in validations]
    improved = accuracies.index(max(accuracies))
    assert metrics["stopped_at"] == validations[-1]["step"] == validations[improved]["step"] + 2 < 16
    assert len(validations) == improved + 3
    assert metrics["val_acc"] == max(accuracies)
    best = max(validations, key=lambda v: (v["val_acc"], -v["val_loss"], -v["step"]))
    assert metrics["step"] == best["step"]
    state = json.loads((workspace.work_dir(finetune) / "checkpoints" / f"step-{metrics['stopped_at']:07d}" / "state.json")
                       .read_text())
    assert state["training_state"]["stopped_at"] == metrics["stopped_at"]

    # The same step, from its checkpoints alone (as if killed after stopping, before its result
    # was written), in a fresh workspace: it trains no further and gives the same model.
    again = step(tiny_task, callbacks=[Lazy(Recording)], **settings)
    assert again.unique_id == finetune.unique_id
    fresh = LocalWorkspace(tmp_path / "other")
    shutil.copytree(workspace.work_dir(finetune), fresh.work_dir(again), dirs_exist_ok=True)
    resumed = again.result(fresh)
    assert not any(call[0] in ("pre_batch", "post_batch") for call in calls(fresh, again))
    assert same_weights(resumed.state_dict, result.state_dict)
    assert resumed.training_metrics == metrics


def test_the_result_records_the_training_curves(tiny_task, tmp_path):
    workspace = LocalWorkspace(tmp_path)
    finetune = step(tiny_task, log_every=1)
    result = finetune.result(workspace)
    history = result.training_metrics["history"]
    assert [s for s, _ in history["loss"]] == [1, 2, 3, 4]
    assert all(isinstance(loss, float) and loss > 0 for _, loss in history["loss"])
    assert [v["step"] for v in history["validations"]] == [2, 4]
    assert {k: result.training_metrics[k] for k in ("step", "val_acc")} in [
        {"step": v["step"], "val_acc": v["val_acc"]} for v in history["validations"]]
    cached = LocalWorkspace(tmp_path).step_cache[finetune]  # model.json, read back
    assert cached.training_metrics == result.training_metrics
    assert "stopped_at" not in result.training_metrics
    assert len(json.dumps(result.training_metrics)) < 1000
