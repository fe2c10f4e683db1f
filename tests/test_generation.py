"""Generation in catwalk::predict: greedy decoding equal to transformers' own, the same
generations for any batch size and worker count, stop strings, truncation, resume from journals."""

import pytest
import torch
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import PredictStep
from catwalk_steps.models import generation
from catwalk_steps.models.conventions import TokenConventions
from catwalk_steps.models.generation import GenerationRequest, cut_at_stop, generate_greedy
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.models.weights import load_pretrained
from catwalk_steps.tasks import GenerationTask

from .conftest import TINY_MODEL, write_jsonl
from .test_seq2seq import tiny_t5  # noqa: F401  (a fixture)

WORDS = "the cat sat on a mat and then it ran to the door where a dog slept all day".split()
#: Prompts of many lengths (so batches pad), one longer than the tiny model's 64-token window.
ROWS = [{"prompt": " ".join(WORDS[: 1 + (3 * n) % len(WORDS)]) + "\nAnswer:", "answers": [WORDS[n % 7]]}
        for n in range(31)] + [{"prompt": " ".join(WORDS * 4), "answers": ["cat"]}]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    path = write_jsonl(tmp_path_factory.mktemp("generation") / "validation.jsonl", ROWS)
    return GenerationTask(data_files={"validation": str(path)}, until=["\n", " mat"], max_new_tokens=10)


@pytest.fixture(scope="module")
def batch_of_32(task, tmp_path_factory):
    step = PredictStep(model=TINY_MODEL, task=task, device="cpu", step_name="generate")
    return step, step.result(LocalWorkspace(tmp_path_factory.mktemp("batch-32")))


def test_greedy_generation_is_transformers_generate_cut_at_the_first_stop_string():
    spec = ModelSpec.parse(TINY_MODEL)
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec).eval()
    prompts = [row["prompt"] for row in ROWS[:6]] + [""]
    conventions = TokenConventions(tokenizer)
    requests = [GenerationRequest(conventions.prompt(p), ("t",) if n % 2 else (), 12) for n, p in enumerate(prompts)]
    ours = generate_greedy(lm, conventions, requests, pad_token_id=tokenizer.pad_token_id, max_length=64, max_batch_size=4)
    for request, generated in zip(requests, ours):
        ids = torch.tensor([request.prompt])
        out = lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False, pad_token_id=0)
        expected = cut_at_stop(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True), request.until)[0]
        assert generated["text"] == expected
        assert generated["margin"] > 0


def test_encoder_decoders_generate_as_transformers_does(tiny_t5):
    spec = ModelSpec.parse(tiny_t5)
    tokenizer, lm = spec.load_tokenizer(), load_pretrained(spec).eval()
    prompts = [row["prompt"] for row in ROWS[:5]]
    requests = [GenerationRequest(TokenConventions(tokenizer).prompt(p), (), 6) for p in prompts]
    ours = generate_greedy(lm, TokenConventions(tokenizer), requests, pad_token_id=0, max_length=64, max_batch_size=3)
    for request, generated in zip(requests, ours):
        ids = torch.tensor([list(request.prompt) + [tokenizer.eos_token_id]])
        out = lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
        assert generated["text"] == tokenizer.decode(out[0], skip_special_tokens=True)


def test_records_hold_the_generation_its_references_scores_and_truncation(batch_of_32):
    _, records = batch_of_32
    assert len(records) == len(ROWS)
    first = records[0]
    assert set(first) == {"id", "num_prompt_tokens", "truncated", "generation", "references", "scores", "margin", "kind",
                          "num_shots"}
    assert first["kind"] == "generate_until"
    assert first["references"] == [ROWS[0]["answers"][0]] and set(first["scores"]) == {"exact_match", "f1"}
    assert [r["truncated"] for r in records] == [False] * 31 + [True]
    assert records[-1]["num_prompt_tokens"] > 64 - 10
    assert all("\n" not in r["generation"] and " mat" not in r["generation"] for r in records)


@pytest.mark.parametrize("batching", [
    {"max_batch_size": 1},
    pytest.param({"device_count": 2}, marks=[pytest.mark.ddp, pytest.mark.full]),  # 2 processes: ~40 s here
])
def test_batching_does_not_change_generations(task, batch_of_32, batching, tmp_path):
    step_32, by_32 = batch_of_32
    step = PredictStep(model=TINY_MODEL, task=task, device="cpu", step_name="generate", **batching)
    assert step.unique_id == step_32.unique_id
    found = step.result(LocalWorkspace(tmp_path))
    assert [r["generation"] for r in found] == [r["generation"] for r in by_32]
    assert not list((tmp_path / "cache" / step.unique_id / "work").glob("*.jsonl"))  # journals gone once cached


def test_an_interrupted_run_resumes_from_the_generations_journaled(task, batch_of_32, tmp_path, monkeypatch):
    real, batches = generation._causal_batch, []

    def interrupted_after_two_batches(lm, sequences, prompts, pad_token_id):
        if len(batches) == 2:
            raise KeyboardInterrupt
        batches.append(len(prompts))
        return real(lm, sequences, prompts, pad_token_id)

    step = PredictStep(model=TINY_MODEL, task=task, device="cpu", max_batch_size=8, step_name="generate")
    workspace = LocalWorkspace(tmp_path)
    monkeypatch.setattr(generation, "_causal_batch", interrupted_after_two_batches)
    with pytest.raises(KeyboardInterrupt):
        step.result(workspace)
    assert step not in workspace.step_cache
    batches.clear()
    monkeypatch.setattr(generation, "_causal_batch", lambda *args: batches.append(len(args[2])) or real(*args))
    resumed = step.result(workspace)
    assert batches == [8, 8]  # the two batches not journaled
    assert [r["generation"] for r in resumed] == [r["generation"] for r in batch_of_32[1]]


def test_lm_specs_are_the_rc_model_with_the_same_cache_key(task):
    lm_spec = "lm::" + TINY_MODEL[len("rc::"):]
    assert ModelSpec.parse(lm_spec) == ModelSpec.parse(TINY_MODEL)
    same = [PredictStep(model=spec, task=task, step_name="generate").unique_id for spec in (lm_spec, TINY_MODEL)]
    assert same[0] == same[1]


def test_a_budget_that_leaves_no_room_for_a_prompt_is_refused_before_the_model_loads(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", ROWS[:2])
    task = GenerationTask(data_files={"validation": str(path)}, max_new_tokens=64)
    with pytest.raises(ConfigurationError, match="max_new_tokens=64 leaves no room for a prompt in the model's "
                                                 "context window of 64 tokens"):
        PredictStep(model=TINY_MODEL, task=task, step_name="generate").result(LocalWorkspace(tmp_path / "ws"))


def test_a_budget_that_leaves_the_prompt_one_token_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    # It was taken: every prompt was cut to its last token.
    path = write_jsonl(tmp_path / "v.jsonl", ROWS[:2])
    task = GenerationTask(data_files={"validation": str(path)}, max_new_tokens=63)
    monkeypatch.setattr("catwalk_steps.prediction.plan.run_on_workers", None)  # no worker (no weights) may start
    with pytest.raises(ConfigurationError) as error:
        PredictStep(model=TINY_MODEL, task=task, step_name="generate").result(LocalWorkspace(tmp_path / "ws"))
    assert str(error.value) == (
        "max_new_tokens=63 leaves 1 of the model's 64 tokens for the prompt, and 2 of 2 prompts are longer (up to 11 "
        "tokens): each would be cut to its last 1; lower max_new_tokens to at most 48"
    )


def test_a_budget_that_cuts_some_prompts_costs_a_warning(task, caplog):
    from catwalk_steps.models.prompt_room import generation_requests

    generation_requests(ModelSpec.parse(TINY_MODEL).conventions(), task.instances("validation"), 64)
    assert ("1 of 32 prompts are longer than the 54 tokens max_new_tokens=10 leaves of the model's 64: they are cut "
            "from the left (truncated: true in their records)") in caplog.text
