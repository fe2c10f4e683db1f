import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from catwalk_steps import FinetunedModel, FinetunedModelFormat
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import load_pretrained, load_with_weights
from catwalk_steps.models.finetuned import WEIGHTS_FILE
from catwalk_steps.tango_fixes.damaged_entries import CorruptCacheError

from .conftest import TINY, TINY_MODEL


@pytest.fixture
def finetuned() -> FinetunedModel:
    spec = ModelSpec.parse(TINY_MODEL)
    lm = load_pretrained(spec)
    with torch.no_grad():
        lm.transformer.h[0].mlp.c_fc.weight.add_(1.0)  # stands in for training
    return FinetunedModel(spec, lm.state_dict(), {"val_acc": 0.75})


def test_round_trip_keeps_tied_weights_and_loads_strictly(tmp_path, finetuned):
    FinetunedModelFormat().write(finetuned, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json", WEIGHTS_FILE]
    meta = json.loads((tmp_path / "model.json").read_text())
    assert meta["aliases"] == {"lm_head.weight": "transformer.wte.weight"}

    restored = FinetunedModelFormat().read(tmp_path)
    assert restored.spec == finetuned.spec and restored.training_metrics == {"val_acc": 0.75}
    assert list(restored.state_dict) == list(finetuned.state_dict)
    for name, tensor in restored.state_dict.items():
        assert tensor.device.type == "cpu"
        assert torch.equal(tensor, finetuned.state_dict[name])
    fresh = AutoModelForCausalLM.from_pretrained(TINY / "model")
    fresh.load_state_dict(restored.state_dict, strict=True)
    assert torch.equal(fresh.transformer.h[0].mlp.c_fc.weight, finetuned.state_dict["transformer.h.0.mlp.c_fc.weight"])


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_weights_are_reported_not_loaded(tmp_path, finetuned, damage):
    FinetunedModelFormat().write(finetuned, tmp_path)
    data = (tmp_path / WEIGHTS_FILE).read_bytes()
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = data[:-10] + bytes([data[-10] ^ 1]) + data[-9:]
    (tmp_path / WEIGHTS_FILE).write_bytes(data)
    with pytest.raises(CorruptCacheError, match="does not match the checksum"):
        FinetunedModelFormat().read(tmp_path)


def test_mismatched_state_dict_names_the_first_keys(finetuned):
    state = dict(finetuned.state_dict)
    state.pop("transformer.h.1.ln_1.weight")
    state["transformer.extra"] = torch.zeros(1)
    state["transformer.wpe.weight"] = torch.zeros(3, 3)
    with pytest.raises(Exception) as error:
        load_with_weights(finetuned.spec, state)
    message = str(error.value)
    assert "missing keys: transformer.h.1.ln_1.weight" in message
    assert "unexpected keys: transformer.extra" in message
    assert "shape mismatches: transformer.wpe.weight" in message
