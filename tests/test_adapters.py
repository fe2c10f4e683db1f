"""Adapters (LoRA, IA3), memory-lean loading, mixed precision and gradient checkpointing."""

import json
import shutil

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, FinetuneStep, PredictStep
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import load_pretrained, meta_model
from catwalk_steps.models.rank_classification import RankClassificationCollator, RankClassificationModel
from catwalk_steps.kinds.multiple_choice import choice_examples

from .conftest import NO_DROPOUT, TINY, TINY_MODEL

SETTINGS = dict(
    model=TINY_MODEL, batch_size=8, micro_batch_size=4, train_epochs=2, train_limit=32, validation_limit=24,
    learning_rate=3e-3,
)
ADAPTERS = {"lora": {"type": "lora", "r": 4, "alpha": 8, "dropout": 0.0}, "ia3": {"type": "ia3"}}


def finetune(task, **overrides) -> FinetuneStep:
    return FinetuneStep(tasks=[task], step_name="finetune", **{**SETTINGS, **overrides})


def evaluate(step, task, workspace):
    predictions = PredictStep(model=step, task=task, limit=24, step_name="predict")
    return predictions.result(workspace), CalculateMetricsStep(predictions=predictions, step_name="m").result(workspace)


@pytest.mark.ddp
@pytest.mark.parametrize("kind", ["lora", pytest.param("ia3", marks=pytest.mark.full)])
def test_adapters_train_cache_reload_and_score_on_one_and_two_workers(tiny_task, tmp_path, kind):
    results = {}
    for device_count in (1, 2):
        step = finetune(tiny_task, adapter=ADAPTERS[kind], device_count=device_count)
        workspace = LocalWorkspace(tmp_path / str(device_count))
        results[device_count] = step, workspace, step.result(workspace)
    (step, workspace, single), (_, _, double) = results[1], results[2]
    assert results[1][0].unique_id == results[2][0].unique_id

    # Only the adapter is cached: its weights alone, small beside the model's.
    assert single.adapter == ADAPTERS[kind]
    assert set(single.state_dict) and all(f"{kind}_" in name for name in single.state_dict)
    (entry,) = (tmp_path / "1" / "cache").glob("FinetuneStep-*")
    assert (entry / "model.safetensors").stat().st_size < 0.1 * (TINY / "model" / "model.safetensors").stat().st_size
    assert json.loads((entry / "model.json").read_text())["adapter"] == ADAPTERS[kind]

    # The same adapter on 1 and 2 workers; it changed the model; it scores the same from memory
    # and from the cache, and as training's validation said.
    worst = max((single.state_dict[k] - double.state_dict[k]).abs().max().item() for k in single.state_dict)
    assert worst < 1e-4
    from_cache = LocalWorkspace(workspace.dir).step_cache[step]
    predict = PredictStep(model=step, task=tiny_task, limit=24, step_name="predict")
    assert predict.run(model=from_cache, task=tiny_task, limit=24) == predict.run(model=single, task=tiny_task, limit=24)
    stock = PredictStep(model=TINY_MODEL, task=tiny_task, limit=24, step_name="stock").result(workspace)
    assert [p["logliks"] for p in stock] != [p["logliks"] for p in predict.run(model=single, task=tiny_task, limit=24)]
    _, metrics = evaluate(step, tiny_task, workspace)
    assert metrics["acc"] == pytest.approx(single.training_metrics["val_acc"], abs=1e-6)


def test_lora_targets_the_architectures_default_modules(tiny_task, workspace):
    result = finetune(tiny_task, adapter={"type": "lora"}, train_epochs=1).result(workspace)
    assert {name.split(".")[-3] for name in result.state_dict} == {"c_attn"}  # peft's GPT-2 default


@pytest.mark.parametrize(
    "adapter, message",
    [
        ({"type": "prefix"}, "adapter type must be one of \\['ia3', 'lora'\\]"),
        ({"type": "lora", "rank": 8}, "Unknown lora adapter settings \\['rank'\\]"),
        ({"type": "lora", "target_modules": ["no_such_module"]}, "Cannot add the lora adapter"),
    ],
)
def test_bad_adapter_settings_fail_clearly(tiny_task, workspace, adapter, message):
    with pytest.raises(ConfigurationError, match=message):
        finetune(tiny_task, adapter=adapter, train_epochs=1).result(workspace)


def test_a_local_model_edited_in_place_gets_a_new_key(tiny_task, tmp_path):
    model = shutil.copytree(TINY / "model", tmp_path / "model")
    before = finetune(tiny_task, model=f"rc::{model}").unique_id
    assert finetune(tiny_task, model=f"rc::{model}").unique_id == before
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "resid_pdrop": 0.2}))
    assert finetune(tiny_task, model=f"rc::{model}").unique_id != before
    assert PredictStep(model=f"rc::{model}", task=tiny_task).unique_id != PredictStep(
        model=TINY_MODEL, task=tiny_task).unique_id


def test_loading_fine_tuned_weights_never_reads_the_base_weights(tiny_task, workspace, monkeypatch):
    step = finetune(tiny_task, train_epochs=1)
    step.result(workspace)
    finetuned = LocalWorkspace(workspace.dir).step_cache[step]
    read = []
    real = meta_model.read_tensors

    def recording(path, dtype):
        read.append(path)
        return real(path, dtype)

    monkeypatch.setattr(meta_model, "read_tensors", recording)
    for dtype in (torch.float32, torch.bfloat16):
        lm = finetuned.load_model(dtype)
        assert {p.dtype for p in lm.parameters()} == {dtype}
        assert not any(p.is_meta for p in lm.parameters())
    assert read == [finetuned.weights_file] * 2  # the fine-tuned file only, once per load
    assert finetuned._state_dict is None  # and the cache entry was never held as a state dict


def test_bf16_mixed_training_validates_as_prediction_scores(tiny_task, workspace):
    step = finetune(tiny_task, precision="bf16-mixed")
    result = step.result(workspace)
    _, metrics = evaluate(step, tiny_task, workspace)
    assert metrics["acc"] == pytest.approx(result.training_metrics["val_acc"], abs=1e-6)
    plain = finetune(tiny_task).result(LocalWorkspace(workspace.dir.parent / "plain"))
    assert any(not torch.equal(result.state_dict[k], plain.state_dict[k]) for k in plain.state_dict)


def saved_activation_bytes(model: RankClassificationModel, batch) -> int:
    """Bytes of the tensors one forward pass keeps for the backward pass, parameters aside: its
    activation memory, which gradient checkpointing exists to cut. Inside a checkpointed block
    torch.utils.checkpoint's own hooks take over (nothing is kept there); the block's inputs,
    kept to recompute it from, are saved through ours and counted. Views count once."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(**batch)["loss"]  # held: the graph keeps what was saved until the pass ends
    del loss
    return sum(kept.values())


def test_gradient_checkpointing_keeps_fewer_activations(tiny_task):
    spec = ModelSpec.parse(TINY_MODEL, config_overrides=NO_DROPOUT)
    tokenizer = spec.load_tokenizer()
    batch = RankClassificationCollator(tokenizer.pad_token_id, 64)(
        choice_examples(spec.conventions(), tiny_task.instances("train", 8), desc="Tokenizing"))
    plain, checkpointed = (
        saved_activation_bytes(RankClassificationModel(spec, gradient_checkpointing=flag).train(), batch)
        for flag in (False, True)
    )
    print(f"activations kept for backward: {plain} bytes, {checkpointed} with checkpointing")
    # Without checkpointing each block keeps, among others, its MLP's inner activation: 4 * n_embd
    # float32 values per token of the batch. Checkpointing must free at least that, in every block.
    config = load_pretrained(spec).config
    mlp_inner = batch["input_ids"].numel() * 4 * config.n_embd * 4
    assert plain - checkpointed >= config.n_layer * mlp_inner


def test_gradient_checkpointing_changes_memory_not_the_model(tiny_task, tmp_path):
    """No tolerance: checkpointing recomputes each block in the backward pass from the same inputs,
    with the same float32 kernels and its RNG state restored (dropout, on here, replays its masks),
    so gradients and weights are bit for bit those of training without it. Without it, that is,
    and without shared contexts, which checkpointing turns off (sharing is the same sums in another
    float32 order: tests/test_shared_context_training.py)."""
    plain = finetune(tiny_task, shared_context=False).result(LocalWorkspace(tmp_path / "plain"))
    checkpointed = finetune(tiny_task, gradient_checkpointing=True).result(LocalWorkspace(tmp_path / "gc"))
    assert plain.state_dict.keys() == checkpointed.state_dict.keys()
    assert all(torch.equal(plain.state_dict[k], checkpointed.state_dict[k]) for k in plain.state_dict)
    assert plain.training_metrics == checkpointed.training_metrics
