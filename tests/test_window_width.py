"""Batches whose every query fits the model's window, but whose padded rows together would not: a
long context with short choices beside a short context with long choices (scoring, training), a
long prompt with a short budget beside a short prompt with a long one (generation). GPT-2's
learned position table raised an IndexError on the padding's positions, and GPT-Neo's attention
mask, a buffer the window's size, on the padded width; each batch now stays within the window,
with the numbers of each query computed alone."""

import pytest
import torch

from catwalk_steps.models.generation import GenerationRequest, generate_greedy
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.rank_classification import ChoiceRow, RankClassificationCollator, RankClassificationModel
from catwalk_steps.models.scoring import Query, score_queries
from catwalk_steps.models.shared_context import can_share_contexts
from catwalk_steps.models.weights import load_pretrained

from .conftest import NO_DROPOUT, TINY, TINY_MODEL

WINDOW = 64  # the demo's GPT-2's, and the GPT-Neo's built here
NO_DROPOUT_NEO = dict(embed_dropout=0.0, attention_dropout=0.0, resid_dropout=0.0)


@pytest.fixture(scope="module", params=["gpt2", "gpt_neo"])
def model(request, tmp_path_factory) -> str:
    if request.param == "gpt2":
        return TINY_MODEL
    from transformers import AutoTokenizer, GPTNeoConfig, GPTNeoForCausalLM

    directory = tmp_path_factory.mktemp("gpt-neo")
    tokenizer = AutoTokenizer.from_pretrained(TINY / "model")
    torch.manual_seed(0)
    config = GPTNeoConfig(vocab_size=len(tokenizer), hidden_size=32, num_layers=2, num_heads=4,
                          attention_types=[[["global", "local"], 1]], window_size=16,
                          max_position_embeddings=WINDOW, **NO_DROPOUT_NEO)
    GPTNeoForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return f"rc::{directory}"


LONG_CONTEXT = [Query(tuple(range(1, WINDOW - 8)), (5 + k, 6 + k)) for k in range(2)]  # 55 tokens, 2-token choices
LONG_CHOICES = [Query(tuple(range(1, 11)), tuple(range(100 * k, 100 * k + 40))) for k in (1, 2)]  # 10, then 40


def loaded(model: str):
    spec = ModelSpec.parse(model)
    return spec, load_pretrained(spec).eval()


def test_scoring(model):
    _, lm = loaded(model)
    assert lm.config.max_position_embeddings == WINDOW
    queries = LONG_CONTEXT + LONG_CHOICES
    assert all(len(q.context) + len(q.continuation) <= WINDOW for q in queries)
    kwargs = dict(pad_token_id=0, max_length=WINDOW, max_batch_size=8, max_batch_tokens=10**6)
    batches = []
    together = score_queries(lm, queries, on_batch=batches.append, **kwargs)
    if can_share_contexts(lm):  # (not GPT-Neo under transformers 4.57: plain rows, each cut to the window)
        assert sorted(len(batch) for batch in batches) == [2, 2]  # each instance's choices apart
    assert together == pytest.approx([score_queries(lm, [q], **kwargs)[0] for q in queries], abs=1e-4)


def test_training(model):
    spec = ModelSpec.parse(model, config_overrides=NO_DROPOUT if "neo" not in model else NO_DROPOUT_NEO)
    torch.manual_seed(0)
    rank = RankClassificationModel(spec, shared_context=True).eval()
    rows = [ChoiceRow(tuple(LONG_CONTEXT), 0), ChoiceRow(tuple(LONG_CHOICES), 1)]
    collate = RankClassificationCollator(0, WINDOW, shared_context=True)
    assert "context_ids" not in collate(rows)  # padded together they would not fit: plain
    assert all("context_ids" in collate([row]) for row in rows)  # each alone is shared
    with torch.no_grad():
        together = rank(**collate(rows))["losses"]
        alone = torch.cat([rank(**collate([row]))["losses"] for row in rows])
    assert together.tolist() == pytest.approx(alone.tolist(), rel=1e-4)


def test_generation(model):
    spec, lm = loaded(model)
    requests = [GenerationRequest(tuple(range(1, 100)), (), 2), GenerationRequest((5, 6, 7), (), 40)]
    kwargs = dict(pad_token_id=0, max_length=WINDOW, max_batch_size=2)
    together = generate_greedy(lm, spec.conventions(), requests, **kwargs)
    alone = [generate_greedy(lm, spec.conventions(), [request], **kwargs)[0] for request in requests]
    assert [g["text"] for g in together] == [g["text"] for g in alone]
