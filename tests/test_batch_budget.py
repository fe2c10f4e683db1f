"""``max_batch_tokens: "auto"``: checked at graph build, resolved from free memory in each worker,
and the same predictions as a fixed budget."""

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from transformers import GPT2Config, LlamaConfig

from catwalk_steps import PredictStep
from catwalk_steps.models import batch_budget
from catwalk_steps.models.batch_budget import (
    MARGIN, auto_batch_tokens, bytes_per_token, check_batch_tokens, resolved_batch_tokens,
)
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import load_pretrained

from .conftest import TINY, TINY_MODEL


@pytest.mark.parametrize("value", [1, 16384, "auto"])
def test_positive_ints_and_auto_are_settings(value):
    check_batch_tokens(value)


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "16384", "Auto", None])
def test_anything_else_is_refused_when_the_graph_is_built(value, tiny_task):
    with pytest.raises(ConfigurationError, match="max_batch_tokens"):
        PredictStep(model=TINY_MODEL, task=tiny_task, max_batch_tokens=value)


def test_a_token_costs_its_cache_activations_scores_and_logits():
    gpt2 = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257)
    cache, activations, scores = 2 * 12 * 768 * 2, (6 * 768 + 2 * 3072) * 2, 2 * 12 * 1024 * 4
    assert bytes_per_token(gpt2, torch.bfloat16, 1024, chunked_logits=True) == cache + activations + scores
    assert bytes_per_token(gpt2, torch.bfloat16, 1024, chunked_logits=False) == (
        cache + activations + scores + 50257 * (2 + 8))
    # Grouped-query attention caches its key/value heads only.
    llama = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=32000)
    assert bytes_per_token(llama, torch.float32, 4096, chunked_logits=True) == (
        2 * 32 * 8 * 128 * 4 + (6 * 4096 + 2 * 14336) * 4 + 2 * 32 * 4096 * 4)


@pytest.fixture(scope="module")
def tiny_lm():
    return load_pretrained(ModelSpec(str(TINY / "model"))).eval()


def test_auto_is_the_free_memory_less_the_margin_over_a_token_s_cost(tiny_lm, monkeypatch):
    per_token = bytes_per_token(tiny_lm.config, torch.float32, 64, chunked_logits=True)
    free = batch_budget.chunk_bytes(torch.device("cpu")) / (1 - MARGIN) + 1000 * per_token / (1 - MARGIN)
    monkeypatch.setattr(batch_budget, "free_memory", lambda device: free)
    cpu = torch.device("cpu")
    assert auto_batch_tokens(tiny_lm, cpu, max_length=64, max_batch_size=32) == 1000
    assert auto_batch_tokens(tiny_lm, cpu, max_length=64, max_batch_size=4) == 4 * 65  # what 4 rows can use
    assert auto_batch_tokens(tiny_lm, cpu, max_length=64, max_batch_size=32, workers_sharing=2) == 65  # one query
    assert resolved_batch_tokens(512, tiny_lm, cpu, max_length=64, max_batch_size=32) == 512


def test_cuda_reads_the_device_s_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (3 * 2**30, 80 * 2**30))
    assert batch_budget.free_memory(torch.device("cuda:0")) == 3 * 2**30
    assert batch_budget.free_memory(torch.device("cpu")) > 0


def test_auto_predicts_what_a_fixed_budget_does(tiny_task, monkeypatch):
    fixed = PredictStep(model=TINY_MODEL, task=tiny_task, limit=24, max_batch_tokens=16384, device="cpu")
    auto = PredictStep(model=TINY_MODEL, task=tiny_task, limit=24, max_batch_tokens="auto", device="cpu")
    assert auto.unique_id == fixed.unique_id
    budgets, resolve = [], batch_budget.auto_batch_tokens

    def recorded(*args, **kwargs):
        budgets.append(resolve(*args, **kwargs))
        return budgets[-1]

    monkeypatch.setattr(batch_budget, "auto_batch_tokens", recorded)
    assert auto.run(**auto.kwargs) == fixed.run(**fixed.kwargs)
    assert budgets == [32 * 65]  # resolved once, in the worker; this machine's memory holds a full batch
