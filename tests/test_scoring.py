import contextlib
import json

import pytest
import torch

from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.models.conventions import TokenConventions
from catwalk_steps.models.scoring import Query, budget_batches, score_queries

from .conftest import TINY_MODEL

PAIRS = [
    ("Question: How do I cut the bread?\nAnswer:", " Use a sharp knife."),
    ("Question: How do I cut the bread?\nAnswer:", " Use the fridge."),
    ("Question: To light the candle, what should I do?\nAnswer: ", "Get a match first."),
    ("", "Take the key and do it."),
    ("Best way to sweep the floor?", " Use a broom."),
]


@pytest.fixture(scope="module")
def tiny():
    spec = ModelSpec.parse(TINY_MODEL)
    return spec.load_tokenizer(), load_pretrained(spec).eval()


def direct_loglik(lm, tokenizer, context: str, continuation: str) -> float:
    """One unpadded forward pass per pair, log-softmax over the whole vocabulary."""
    context_ids = tokenizer.encode(context.rstrip()) or [tokenizer.eos_token_id]
    whole = tokenizer.encode(context.rstrip() + context[len(context.rstrip()):] + continuation)
    continuation_ids = whole[len(tokenizer.encode(context.rstrip())):]
    ids = torch.tensor([context_ids + continuation_ids])
    with torch.no_grad():
        logprobs = lm(ids).logits.log_softmax(-1)[0, :-1]
    targets = ids[0, 1:][-len(continuation_ids):]
    return logprobs[-len(continuation_ids):].gather(-1, targets[:, None]).sum().item()


def test_logliks_equal_a_direct_computation(tiny):
    tokenizer, lm = tiny
    queries = [TokenConventions(tokenizer).pair(c, x) for c, x in PAIRS]
    ours = score_queries(lm, queries, pad_token_id=tokenizer.pad_token_id, max_length=64, max_batch_size=3, max_batch_tokens=10**6)
    expected = [direct_loglik(lm, tokenizer, c, x) for c, x in PAIRS]
    assert ours == pytest.approx(expected, abs=1e-5)


def test_batching_does_not_change_logliks(tiny):
    tokenizer, lm = tiny
    queries = [TokenConventions(tokenizer).pair(c, x) for c, x in PAIRS]
    kwargs = dict(pad_token_id=tokenizer.pad_token_id, max_length=64)
    one_by_one = score_queries(lm, queries, max_batch_size=1, max_batch_tokens=10**6, **kwargs)
    by_budget = score_queries(lm, queries, max_batch_size=100, max_batch_tokens=40, **kwargs)
    assert by_budget == pytest.approx(one_by_one, abs=1e-5)


def test_trailing_context_whitespace_moves_to_the_continuation(tiny):
    tokenizer, _ = tiny
    assert TokenConventions(tokenizer).pair("Answer: ", "yes") == TokenConventions(tokenizer).pair("Answer:", " yes")
    assert TokenConventions(tokenizer).pair("", "yes").context == (tokenizer.eos_token_id,)


def test_long_inputs_are_cut_from_the_left(tiny):
    tokenizer, lm = tiny
    long_context = " ".join(["the box"] * 100)
    query = TokenConventions(tokenizer).pair(long_context, " Use a broom.")
    assert len(query.context) + len(query.continuation) > 64
    kwargs = dict(pad_token_id=tokenizer.pad_token_id, max_length=64, max_batch_size=8, max_batch_tokens=4096)
    truncated = Query(query.context[-(64 + 1 - len(query.continuation)):], query.continuation)
    assert score_queries(lm, [query], **kwargs) == pytest.approx(score_queries(lm, [truncated], **kwargs), abs=1e-6)


def test_budget_batches_cover_everything_longest_first_within_budget():
    lengths = [5, 40, 12, 40, 3, 7, 30, 1]
    batches = list(budget_batches(lengths, max_batch_size=3, max_batch_tokens=80))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) <= 3 and len(b) * max(lengths[i] for i in b) <= 80 for b in batches)
    assert [lengths[i] for i in batches[0]] == [40, 40]
    assert list(budget_batches([100], max_batch_size=4, max_batch_tokens=10)) == [[0]]
    # Long-tailed lengths: no row is padded to more than twice its own length.
    tail = [245, 151, 120, 60, 52, 40, 31, 30, 20, 15, 15, 14, 12, 9, 8, 7]
    batches = list(budget_batches(tail, max_batch_size=64, max_batch_tokens=16384))
    assert all(2 * tail[i] >= tail[b[0]] for b in batches for i in b)
    assert [[tail[i] for i in b] for b in batches][:2] == [[245, 151], [120, 60]]


@pytest.mark.parametrize("interrupted", [False, True])
def test_each_batch_is_read_once_the_next_is_queued(tiny, monkeypatch, interrupted):
    """The host reads batch k's results (a wait for the device) only after queueing batch k+1,
    so that a GPU computes while the host reads and collates; every batch is still read, in order,
    the last at the end, and on an interruption every batch computed before it."""
    from catwalk_steps.models import scoring

    tokenizer, lm = tiny
    queries = [TokenConventions(tokenizer).pair(f"Question {n}: where?", " there") for n in range(7)]
    events, real = [], scoring.continuation_logliks

    def queued(lm, **tensors):
        if interrupted and events.count("queue 2") == 3:
            raise KeyboardInterrupt
        events.append(f"queue {len(tensors['input_ids'])}")
        return real(lm, **tensors)

    monkeypatch.setattr(scoring, "continuation_logliks", queued)
    with pytest.raises(KeyboardInterrupt) if interrupted else contextlib.nullcontext():
        score_queries(lm, queries, pad_token_id=0, max_length=64, max_batch_size=2, max_batch_tokens=10**6,
                      on_batch=lambda scored: events.append(f"read {len(scored)}"))
    steady = ["queue 2", "queue 2", "read 2", "queue 2", "read 2"]
    assert events == steady + (["read 2"] if interrupted else ["queue 1", "read 2", "read 1"])


def test_shared_context_scoring_equals_the_plain_method(tiny):
    import random

    from catwalk_steps.models.scoring import collate_queries, continuation_logliks
    from catwalk_steps.models.shared_context import collate_shared, shared_context_logliks

    tokenizer, lm = tiny
    rng = random.Random(0)
    words = "use a sharp knife the fridge broom to cut wash and do it first".split()
    groups = []
    for _ in range(12):
        context = "Question: " + " ".join(rng.choices(words, k=rng.randint(1, 12))) + "\nAnswer:"
        choices = [" " + " ".join(rng.choices(words, k=rng.randint(1, 9))) for _ in range(rng.choice([2, 4]))]
        groups.append([TokenConventions(tokenizer).pair(context, c) for c in choices])
    groups.append([TokenConventions(tokenizer).pair("Q", x) for x in (" a", " b")])  # one-token choices
    with torch.no_grad():
        tensors = collate_shared(
            [g[0].context for g in groups], [[q.continuation for q in g] for g in groups], tokenizer.pad_token_id
        )
        shared = shared_context_logliks(lm, **tensors).tolist()
        flat = [q for g in groups for q in g]
        plain = continuation_logliks(lm, **collate_queries(flat, tokenizer.pad_token_id, 64)).tolist()
    assert shared == pytest.approx(plain, abs=1e-4)

    # Through score_queries, with one instance too long to share (it is truncated instead).
    long_context = " ".join(["the box"] * 40)
    too_long = [TokenConventions(tokenizer).pair(long_context, c) for c in (" Use a broom.", " Use the key.")]
    kwargs = dict(pad_token_id=tokenizer.pad_token_id, max_length=64, max_batch_size=8, max_batch_tokens=4096)
    mixed = score_queries(lm, flat + too_long, **kwargs)
    one_by_one = [score_queries(lm, [q], **kwargs)[0] for q in flat + too_long]
    assert mixed == pytest.approx(one_by_one, abs=1e-4)


class CacheNamedCache(torch.nn.Module):
    """``lm`` with the forward signature of transformers 5.24+, where the key/value cache is
    ``cache`` (``past_key_values`` warns there, and goes in 5.40)."""

    def __init__(self, lm):
        super().__init__()
        self.lm, self.caches, self.config = lm, [], lm.config

    def forward(self, input_ids, cache=None, attention_mask=None, position_ids=None, use_cache=None, logits_to_keep=0):
        self.caches.append(cache)
        # GPT-2 takes the cache second in 4.57 and 5.x alike, whatever its name.
        return self.lm(input_ids, cache, attention_mask=attention_mask, position_ids=position_ids,
                       use_cache=use_cache, logits_to_keep=logits_to_keep)


def test_shared_context_passes_the_cache_under_the_name_forward_takes(tiny):
    from catwalk_steps.models.forward_signature import cache_keyword

    tokenizer, lm = tiny
    renamed = CacheNamedCache(lm)
    assert cache_keyword(lm) in ("cache", "past_key_values") and cache_keyword(renamed) == "cache"
    queries = [TokenConventions(tokenizer).pair(c, x) for c, x in PAIRS]
    kwargs = dict(pad_token_id=tokenizer.pad_token_id, max_length=64, max_batch_size=8, max_batch_tokens=4096)
    assert score_queries(renamed, queries, **kwargs) == score_queries(lm, queries, **kwargs)
    assert renamed.caches and all(c is not None for c in renamed.caches[:2])  # the shared-context path ran


def test_bfloat16_scoring_stays_close_and_float32_is_the_default(tiny_task, tmp_path):
    from tango.common.exceptions import ConfigurationError
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import PredictStep

    def run(**settings):
        step = PredictStep(model=TINY_MODEL, task=tiny_task, limit=16, step_name="p", **settings)
        return step, step.result(LocalWorkspace(tmp_path))

    plain_step, plain = run()
    half_step, half = run(dtype="bfloat16")
    assert run(dtype="float32")[1] == plain and half_step.unique_id != plain_step.unique_id
    for a, b in zip(plain, half):
        assert a["logliks"] == pytest.approx(b["logliks"], rel=0.05)
    with pytest.raises(ConfigurationError, match="dtype must be one of"):
        PredictStep(model=TINY_MODEL, task=tiny_task, dtype="int8")


def test_unconditioned_scores_are_opt_in_and_batched_by_length(tiny_task, tmp_path, monkeypatch):
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import PredictStep
    from catwalk_steps.models import scoring

    widths = []
    real = scoring.shared_context_logliks
    monkeypatch.setattr(
        scoring, "shared_context_logliks",
        lambda lm, **t: widths.append((len(t["context_ids"]), t["mask"].sum(-1).tolist())) or real(lm, **t),
    )

    def run(**settings):
        step = PredictStep(model=TINY_MODEL, task=tiny_task, limit=40, max_batch_size=8, step_name="p", **settings)
        return step, step.result(LocalWorkspace(tmp_path))

    plain_step, plain = run()
    assert all("unconditioned_logliks" not in record for record in plain)
    widths.clear()
    both_step, both = run(unconditioned=True)
    assert both_step.unique_id != plain_step.unique_id
    assert [r["logliks"] for r in both] == [r["logliks"] for r in plain]
    assert all(len(r["unconditioned_logliks"]) == len(r["logliks"]) for r in both)
    # The 80 choices after the bare "Answer:" are one group, cut into parts of 8 by length: each
    # part's longest continuation is no longer than the shortest of the part before it.
    parts = [sorted(lengths) for contexts, lengths in widths if contexts == 1 and len(lengths) == 8]
    assert len(parts) == 10 and all(len(part) == 8 for part in parts)
    assert all(longer[0] >= shorter[-1] for longer, shorter in zip(parts, parts[1:]))
    assert parts[0][0] > parts[-1][-1]


@pytest.mark.parametrize("num_shots", [1, 5])
def test_few_shot_predictions_share_the_context_or_cut_it_from_the_left(tiny, tmp_path, num_shots):
    """1-shot prompts fit the tiny model's 64 tokens and are scored against one encoding of the
    shared context; 5-shot prompts do not, and are cut from the left. Either way each choice
    gets the log-likelihood it gets alone, and ``num_chars`` counts the answer without its
    leading space (lm-evaluation-harness's ``acc_norm``)."""
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import PiqaTask, PredictStep

    from .conftest import TINY

    tokenizer, lm = tiny
    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")},
                    num_shots=num_shots)
    records = PredictStep(model=TINY_MODEL, task=task, limit=4, step_name="p").result(LocalWorkspace(tmp_path))
    queries = [TokenConventions(tokenizer).pair(c, x) for i in task.instances("validation", limit=4) for c, x in i.pairs()]
    fits = [len(q.context) + len(q.continuation) <= 65 for q in queries]
    assert all(fits) if num_shots == 1 else not any(fits)
    alone = [score_queries(lm, [q], pad_token_id=tokenizer.pad_token_id, max_length=64, max_batch_size=1,
                           max_batch_tokens=4096)[0] for q in queries]
    assert [v for r in records for v in r["logliks"]] == pytest.approx(alone, abs=1e-4)
    rows = [json.loads(line) for line in (TINY / "validation.jsonl").read_text().splitlines()[:4]]
    assert [r["num_chars"] for r in records] == [[len(row["sol1"]), len(row["sol2"])] for row in rows]


def test_output_layer_runs_at_real_targets_only_with_the_plain_numbers(tiny, monkeypatch):
    import random

    from catwalk_steps.models import output_layer as module
    from catwalk_steps.models.output_layer import output_layer

    tokenizer, lm = tiny
    assert output_layer(lm) is lm.lm_head
    rng = random.Random(1)
    words = "use a sharp knife the fridge broom to cut wash and do it first".split()
    queries = [  # long-tailed continuations: most of a padded batch is padding
        TokenConventions(tokenizer).pair("Question: " + " ".join(rng.choices(words, k=4)) + "\nAnswer:",
                    " " + " ".join(rng.choices(words, k=rng.choice([1, 2, 3, 25]))))
        for _ in range(24)
    ]
    kwargs = dict(pad_token_id=tokenizer.pad_token_id, max_length=64, max_batch_size=8, max_batch_tokens=4096)
    rows = []
    monkeypatch.setattr(module, "_CHUNK_LOGITS", 7 * lm.config.vocab_size)  # several chunks per batch
    real_head = lm.lm_head.forward
    monkeypatch.setattr(lm.lm_head, "forward", lambda h: rows.append(h.shape[0]) or real_head(h))
    fast = score_queries(lm, queries, **kwargs)
    assert sum(rows) == sum(len(q.continuation) for q in queries)  # no padded position gets logits
    assert max(rows) == 7
    monkeypatch.setitem(module._checked, lm, False)  # the plain pass: logits everywhere
    assert score_queries(lm, queries, **kwargs) == pytest.approx(fast, abs=1e-5)


def test_models_that_change_their_logits_keep_the_plain_pass():
    from transformers import GPT2Config, GPT2LMHeadModel

    from catwalk_steps.models.output_layer import output_layer

    class ScaledLogits(GPT2LMHeadModel):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 2
            return out

    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32)
    assert output_layer(GPT2LMHeadModel(config)) is not None
    assert output_layer(ScaledLogits(config)) is None  # found by comparing both ways
    config.final_logit_softcapping = 30.0  # Gemma's: near-identity on small logits, so read from the config
    assert output_layer(GPT2LMHeadModel(config)) is None
