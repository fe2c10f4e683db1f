"""Training with shared contexts: each instance's context encoded once for all its choices gives
the loss and gradients of encoding every (context, choice) pair."""

import random

import pytest
import torch

from catwalk_steps import FinetuneStep
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.rank_classification import ChoiceRow, RankClassificationCollator, RankClassificationModel
from catwalk_steps.models.conventions import TokenConventions

from .conftest import NO_DROPOUT, TINY_MODEL

WORDS = "use a sharp knife the fridge broom to cut wash and do it first with water then dry".split()


def examples(tokenizer, shape: str, count: int = 6):
    """4-choice instances with long contexts, 2-choice PIQA-like ones, or Winogrande-like ones
    (the choice in the context: one context per choice)."""
    rng = random.Random(shape)
    rows = []
    for n in range(count):
        context = "Question: " + " ".join(rng.choices(WORDS, k=rng.randint(2, 20))) + "\nAnswer:"
        choices = [" " + " ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(4 if shape == "4-choice" else 2)]
        if shape == "winogrande":
            pairs = [(f"The {c} was", " too small to use.") for c in choices]
        else:
            pairs = [(context, c) for c in choices]
        queries = [TokenConventions(tokenizer).pair(c, x) for c, x in pairs]
        rows.append(ChoiceRow(tuple(queries), n % len(pairs)))
    return rows


def loss_and_gradients(model, batch):
    model.zero_grad(set_to_none=True)
    loss = model(**batch)["loss"]
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("adapter", [None, {"type": "lora", "r": 4}], ids=["full", "lora"])
@pytest.mark.parametrize("shape", ["4-choice", "2-choice", "winogrande"])
def test_shared_contexts_give_the_plain_loss_and_gradients(shape, adapter):
    spec = ModelSpec.parse(TINY_MODEL, config_overrides=NO_DROPOUT)
    torch.manual_seed(0)
    model = RankClassificationModel(spec, adapter, shared_context=True).train()
    assert model.shares_contexts
    rows = examples(spec.load_tokenizer(), shape)
    pad = spec.load_tokenizer().pad_token_id
    shared_batch = RankClassificationCollator(pad, 64, shared_context=True)(rows)
    plain_batch = RankClassificationCollator(pad, 64)(rows)
    assert "context_ids" in shared_batch and "context_ids" not in plain_batch
    contexts = {"4-choice": 6, "2-choice": 6, "winogrande": 12}[shape]
    assert shared_batch["context_ids"].shape[0] == contexts  # one per instance, or one per choice

    shared_loss, shared_grads = loss_and_gradients(model, shared_batch)
    plain_loss, plain_grads = loss_and_gradients(model, plain_batch)
    assert shared_loss == pytest.approx(plain_loss, rel=1e-4)
    assert shared_grads.keys() == plain_grads.keys() and shared_grads
    for name, plain in plain_grads.items():
        scale = plain.abs().max().clamp(min=1e-8)
        assert (shared_grads[name] - plain).abs().max() / scale < 1e-4, name


def test_batches_that_must_be_cut_and_gradient_checkpointing_use_the_plain_method():
    spec = ModelSpec.parse(TINY_MODEL, config_overrides=NO_DROPOUT)
    rows = examples(spec.load_tokenizer(), "4-choice")
    pad = spec.load_tokenizer().pad_token_id
    longest = max(len(q.context) + len(q.continuation) for row in rows for q in row.queries)
    collate = RankClassificationCollator(pad, longest - 2, shared_context=True)
    assert "context_ids" not in collate(rows)  # one query is too long: the batch is cut, not shared
    fitting = [row for row in rows  # an instance whose longest context and choice, padded together, fit
               if max(len(q.context) for q in row.queries) + max(len(q.continuation) for q in row.queries) <= longest - 1]
    assert fitting and "context_ids" in collate(fitting[:1])
    assert not RankClassificationModel(spec, gradient_checkpointing=True, shared_context=True).shares_contexts
    assert not RankClassificationModel(spec).shares_contexts


def test_shared_context_is_on_by_default_and_in_the_cache_key(tiny_task):
    kwargs = dict(model=TINY_MODEL, tasks=[tiny_task], batch_size=8)
    default = FinetuneStep(**kwargs)
    assert default.unique_id == FinetuneStep(**kwargs, shared_context=True).unique_id
    assert default.unique_id != FinetuneStep(**kwargs, shared_context=False).unique_id
