"""The generation's key/value cache: what transformers' DynamicCache holds, written in place."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from catwalk_steps.models.conventions import TokenConventions
from catwalk_steps.models.generation import GenerationRequest, generate_greedy
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.reserved_cache import ReservedLayer
from catwalk_steps.models.weights import load_pretrained

from .conftest import TINY_MODEL
from .test_seq2seq import tiny_t5  # noqa: F401  (a fixture)


@pytest.mark.parametrize("capacity", [3, 12, 40])  # overflowing at the prompt, during decoding, never
def test_a_reserved_layer_holds_what_a_dynamic_layer_holds(capacity):
    torch.manual_seed(0)
    reserved, dynamic = ReservedLayer(capacity), DynamicLayer()
    steps = [torch.randn(4, 2, 5, 8)] + [torch.randn(4, 2, 1, 8) for _ in range(9)]
    kept = torch.arange(4)
    for n, keys in enumerate(steps):
        keys = keys[kept]
        values = keys * 2 + 1
        assert all(torch.equal(a, b) for a, b in zip(reserved.update(keys, values), dynamic.update(keys, values)))
        assert reserved.get_seq_length() == dynamic.get_seq_length()
        if n == 4:  # a sequence finishes: the rest go on
            kept = torch.tensor([0, 2, 3])
            reserved.batch_select_indices(kept)
            dynamic.batch_select_indices(kept)
            kept = torch.arange(3)
    assert torch.equal(reserved.keys, dynamic.keys) and torch.equal(reserved.values, dynamic.values)


def test_within_its_capacity_a_layer_writes_in_place():
    layer = ReservedLayer(8)
    layer.update(torch.zeros(2, 1, 3, 4), torch.zeros(2, 1, 3, 4))
    buffer = layer.buffers[0].data_ptr()
    for _ in range(5):
        keys, _ = layer.update(torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4))
    assert layer.buffers[0].data_ptr() == buffer and keys.data_ptr() == buffer and keys.shape[-2] == 8


@pytest.mark.parametrize("model", ["gpt2", "t5"])
def test_generation_reserves_each_layer_s_cache_once_per_batch(model, tiny_t5, monkeypatch):  # noqa: F811
    """The room reserved is what the batch's longest prompt and largest budget need: never
    reallocated while it generates (which would copy the cache, as concatenation does)."""
    spec = ModelSpec.parse(TINY_MODEL if model == "gpt2" else tiny_t5)
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec).eval()
    conventions = TokenConventions(tokenizer)
    prompts = ["The cat sat on the mat and looked out of the window", "A dog", "Birds sing", "Why is the sky blue?"]
    requests = [GenerationRequest(conventions.prompt(p), (), budget) for p, budget in zip(prompts, (4, 9, 2, 7))]
    reservations = []
    reserve = ReservedLayer._reserve
    monkeypatch.setattr(ReservedLayer, "_reserve", lambda self, *a: reservations.append(a[2:]) or reserve(self, *a))
    generate_greedy(lm, conventions, requests, pad_token_id=0, max_length=64, max_batch_size=2)
    longest_first = sorted(requests, key=lambda r: -len(r.prompt))
    batches = [longest_first[:2], longest_first[2:]]
    # The decoder's room: the longest prompt (a T5 decoder's: its start token) and the largest budget.
    rooms = [(1 if model == "t5" else len(b[0].prompt)) + max(r.max_new_tokens for r in b) for b in batches]
    layers = lm.config.num_decoder_layers if model == "t5" else lm.config.n_layer
    # Each layer's room reserved once per batch, empty: (room, positions copied).
    assert reservations == [(rooms[0], 0)] * layers + [(rooms[1], 0)] * layers
