"""``max_batch_tokens`` bounds every forward pass: each pass the model makes while scoring
(choices sharing a context, perplexity documents longer than the window, greedy targets) or
generating holds at most that many tokens (rows x padded positions attended, the key/value cache
included: choices sharing a context each hold a copy of its cache; for generation, each row's
prompt and what it has generated so far), a single request longer than the budget alone in its
batch the only exception. The numbers stay those of unbounded batches."""

import random
from contextlib import contextmanager
from typing import Iterator, List, Tuple

import pytest

from catwalk_steps.models.conventions import TokenConventions
from catwalk_steps.models.generation import GenerationRequest, generate_greedy
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.rolling import document_windows
from catwalk_steps.models.scoring import Query, score_queries
from catwalk_steps.models.weights import load_pretrained

from .conftest import TINY_MODEL

WORDS = "the cat sat on a mat and then it ran to the door where a dog slept all day".split()
WINDOW = 64
UNBOUNDED = dict(max_batch_size=1000, max_batch_tokens=10**9)


@pytest.fixture(scope="module")
def tiny():
    spec = ModelSpec.parse(TINY_MODEL)
    return TokenConventions(spec.load_tokenizer()), load_pretrained(spec).eval()


@contextmanager
def passes(lm) -> Iterator[List[dict]]:
    """Each forward pass of ``lm``'s transformer: its ``input_ids`` and ``attention_mask`` shapes."""
    seen: List[dict] = []

    def record(module, args, kwargs):
        given = {"input_ids": args[0] if args else None, **kwargs}
        seen.append({name: tuple(given[name].shape) for name in ("input_ids", "attention_mask")
                     if given.get(name) is not None})

    handle = lm.base_model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def tokens(shape) -> int:
    return shape[0] * shape[1]


def held(seen_pass: dict) -> int:
    """The positions a pass attends to: its mask's (its cache's and its own), else its inputs'."""
    return tokens(seen_pass.get("attention_mask", seen_pass["input_ids"]))


def test_scoring_passes_hold_at_most_the_budget(tiny):
    conventions, lm = tiny
    documents = [" ".join(WORDS[n:] + WORDS * (2 + n % 3)) for n in range(12)]  # 2 to 5 windows each
    windows = [w for d in documents for w in document_windows(conventions, d, WINDOW)]
    choices = [conventions.pair("Question: where did the cat sit?\nAnswer:", f" on the {w}") for w in WORDS]
    queries = windows + choices
    budget = 4 * WINDOW
    settings = dict(pad_token_id=conventions.pad_token_id, max_length=WINDOW)
    for greedy in (False, True):
        with passes(lm) as seen:
            bounded = score_queries(lm, queries, max_batch_size=32, max_batch_tokens=budget, greedy=greedy, **settings)
        assert seen and max(held(p) for p in seen) <= budget
        with passes(lm) as seen:
            unbounded = score_queries(lm, queries, greedy=greedy, **UNBOUNDED, **settings)
        assert max(held(p) for p in seen) > budget  # the budget bites
        if greedy:
            assert [hit for _, hit in bounded] == [hit for _, hit in unbounded]
            bounded, unbounded = [value for value, _ in bounded], [value for value, _ in unbounded]
        assert bounded == pytest.approx(unbounded, abs=1e-4)


def test_groups_of_choices_of_different_shapes_hold_at_most_the_budget(tiny):
    """A batch of choice groups pads their contexts to the longest and their choices to the
    longest, and each choice holds a copy of its context's cache: groups of long contexts and
    short choices beside groups of short contexts and long choices, each group within the
    budget, must not share a pass that holds more."""
    conventions, lm = tiny
    rng = random.Random(0)

    def ids(count: int) -> Tuple[int, ...]:
        return tuple(rng.randrange(10, 400) for _ in range(count))

    queries = []
    for group in range(6):
        context, choice = (30, 2) if group % 2 else (3, 30)
        shared = ids(context)
        queries += [Query(shared, ids(choice)) for _ in range(4)]
    budget, settings = 300, dict(pad_token_id=conventions.pad_token_id, max_length=WINDOW)
    with passes(lm) as seen:
        bounded = score_queries(lm, queries, max_batch_size=32, max_batch_tokens=budget, **settings)
    assert seen and max(held(p) for p in seen) <= budget
    assert bounded == pytest.approx(score_queries(lm, queries, **UNBOUNDED, **settings), abs=1e-4)


def test_a_query_longer_than_the_budget_is_alone_in_its_pass(tiny):
    conventions, lm = tiny
    windows = document_windows(conventions, " ".join(WORDS * 4), WINDOW)
    with passes(lm) as seen:
        score_queries(lm, windows * 2, pad_token_id=conventions.pad_token_id, max_length=WINDOW,
                      max_batch_size=32, max_batch_tokens=WINDOW // 2)
    assert all(p["input_ids"][0] == 1 for p in seen)


def test_generation_passes_hold_at_most_the_budget(tiny):
    conventions, lm = tiny
    prompts = [" ".join(WORDS[: 1 + 3 * n % len(WORDS)]) + "\nAnswer:" for n in range(24)]
    requests = [GenerationRequest(conventions.prompt(p), ("\n",), 12) for p in prompts]
    budget = 3 * WINDOW
    settings = dict(pad_token_id=conventions.pad_token_id, max_length=WINDOW)
    with passes(lm) as seen:
        bounded = generate_greedy(lm, conventions, requests, max_batch_size=32, max_batch_tokens=budget, **settings)
    assert seen and max(tokens(p["attention_mask"]) for p in seen) <= budget
    with passes(lm) as seen:
        unbounded = generate_greedy(lm, conventions, requests, **UNBOUNDED, **settings)
    assert max(tokens(p["attention_mask"]) for p in seen) > budget  # the budget bites
    assert [g["text"] for g in bounded] == [g["text"] for g in unbounded]
    assert [g["margin"] for g in bounded] == pytest.approx([g["margin"] for g in unbounded], abs=1e-4)
