"""The generation's key/value cache: what transformers' DynamicCache holds, written in place."""

import math

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from catwalk_steps.models.conventions import TokenConventions
from catwalk_steps.models.generation import GenerationRequest, _causal_batch, _seq2seq_batch, _Sequences, generate_greedy
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


def test_after_dynamic_layer_s_own_reorderings_a_reserved_layer_still_holds_what_it_holds():
    """Methods inherited from ``DynamicLayer`` that replace its keys and values (beam search's
    ``reorder_cache``, ``batch_repeat_interleave``) are followed by updates into new buffers."""
    torch.manual_seed(0)
    reserved, dynamic = ReservedLayer(20), DynamicLayer()
    for n, length in enumerate([4, 1, 1, 1, 1]):
        keys = torch.randn(2 if n < 2 else 4, 2, length, 8)
        assert all(torch.equal(a, b) for a, b in zip(reserved.update(keys, -keys), dynamic.update(keys, -keys)))
        if n == 1:
            reserved.batch_repeat_interleave(2), dynamic.batch_repeat_interleave(2)
        if n == 3:
            beams = torch.tensor([3, 0, 0, 2])
            reserved.reorder_cache(beams), dynamic.reorder_cache(beams)
            reserved.batch_select_indices(torch.tensor([0, 3])), dynamic.batch_select_indices(torch.tensor([0, 3]))
            reserved.batch_repeat_interleave(2), dynamic.batch_repeat_interleave(2)
    assert torch.equal(reserved.keys, dynamic.keys) and torch.equal(reserved.values, dynamic.values)


def test_a_layer_copies_only_when_full_into_twice_the_room_up_to_its_capacity():
    layer, rooms = ReservedLayer(10), []
    for length in [3] + [1] * 7:  # a prompt of 3, then 7 decode steps: 10 positions
        keys, _ = layer.update(torch.ones(2, 1, length, 4), torch.ones(2, 1, length, 4))
        assert keys.data_ptr() == layer.buffers[0].data_ptr()  # a view of the buffer, not a copy
        rooms.append(layer.buffers[0].shape[-2])
    assert rooms == [6, 6, 6, 6, 10, 10, 10, 10]  # 2 x 3, then 2 x 7 capped at 10


@pytest.mark.parametrize("model", ["gpt2", "t5"])
def test_generation_grows_each_layer_s_cache_in_place_within_the_batch_s_room(model, tiny_t5, monkeypatch):  # noqa: F811
    """Each layer's cache is copied only when full, into twice its positions, never beyond what
    the batch's longest prompt and largest budget need (what ``max_batch_tokens`` counts): a few
    copies per batch, where concatenation copies at every step."""
    spec = ModelSpec.parse(TINY_MODEL if model == "gpt2" else tiny_t5)
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec).eval()
    conventions = TokenConventions(tokenizer)
    layers = lm.config.num_decoder_layers if model == "t5" else lm.config.n_layer
    reserve = ReservedLayer._reserve
    for prompts, budgets in ((["The cat sat on the mat and looked out of the window", "A dog"], (4, 9)),
                             (["Birds sing", "Why is the sky blue?"], (30, 7))):
        requests = [GenerationRequest(conventions.prompt(p), (), b) for p, b in zip(prompts, budgets)]
        reservations = []  # (layer, room, positions copied) of each reallocation
        monkeypatch.setattr(ReservedLayer, "_reserve",
                            lambda self, *a: reservations.append((id(self), *a[2:])) or reserve(self, *a))
        generate_greedy(lm, conventions, requests, pad_token_id=0, max_length=64, max_batch_size=2)
        # The decoder's room: the longest prompt (a T5 decoder's: its start token) and the largest budget.
        room = (1 if model == "t5" else max(len(r.prompt) for r in requests)) + max(budgets)
        per_layer = {}
        for layer, size, copied in reservations:
            per_layer.setdefault(layer, []).append((size, copied))
        assert len(per_layer) == layers
        for grown in per_layer.values():
            assert grown[0][1] == 0 and all(size <= room for size, _ in grown), (grown, room)
            # Copied only when full: each reallocation copies all of the room before it.
            assert all(copied == before for (before, _), (_, copied) in zip(grown, grown[1:])), grown
            assert len(grown) <= 2 + math.log2(room), grown


@pytest.mark.parametrize("model", ["gpt2", "t5"])
def test_rows_that_finish_first_leave_the_cache_and_the_rest_generate_as_alone(model, tiny_t5):  # noqa: F811
    """Budgets of 2, 5 and 3 tokens, no stop token: the batch drops a row after 2 steps and
    another after 3, and each row's tokens are those it generates in a batch of its own."""
    spec = ModelSpec.parse(TINY_MODEL if model == "gpt2" else tiny_t5)
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec).eval()
    conventions = TokenConventions(tokenizer)
    requests = [GenerationRequest(conventions.prompt(p), (), budget)
                for p, budget in zip(["The cat sat on the mat", "A dog ran", "Why is the sky blue?"], (2, 5, 3))]
    run = _seq2seq_batch if model == "t5" else lambda *a: _causal_batch(*a, pad_token_id=0)

    def generated(batch):
        sequences = _Sequences(tokenizer, batch, stops=set(), until=[() for _ in batch])
        with torch.inference_mode():
            run(lm, sequences, [request.prompt for request in batch])
        return sequences.tokens

    together = generated(requests)
    assert [len(tokens) for tokens in together] == [2, 5, 3]
    assert together == [generated([request])[0] for request in requests]
