"""Special tokens as lm-evaluation-harness 0.4.13 encodes them (``models/conventions.py``), on a
tiny Llama with Mistral-7B v0.1's BOS-adding tokenizer: its requests token for token (every
``add_bos_token`` setting), and its numbers at its defaults for all three request types
(multiple choice, rolling perplexity, generation); GPT-2's encodings are what they were."""

import json

import pytest
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, FinetuneStep, PredictStep
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.tasks import LmEvalTask
from catwalk_steps.tasks.lm_eval_bridge import task_manager

from .conftest import TINY, TINY_MODEL
from .test_lm_eval_perplexity import write_yamls as write_perplexity_yamls

lm_eval = pytest.importorskip("lm_eval")
from .lm_eval_docs import LM_EVAL_TASKS, copy_generation_yamls  # noqa: E402  (imports lm_eval)

PAIRS = [
    ("Question: Open a jar\nAnswer:", " Twist the lid."),
    ("Answer: ", "yes"),  # trailing whitespace moves to the continuation
    ("", "Hello world"),  # an empty context is the prefix token
    ("", "<s> Hello"),  # ... unless the continuation starts with it
    ("<s> Question: is a chat template's text", " kept?"),  # no second BOS
]
TEXTS = ["Question: What is 2 + 2?\nAnswer:", "<s>[INST] Hi [/INST]", "", "A longer document.\n\nWith lines."]


def harness(model: str, **settings):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=model.removeprefix("rc::"), device="cpu", batch_size=32, dtype="float32", **settings)


def harness_pairs(lm, pairs):
    """The (context, continuation) token ids lm-evaluation-harness scores for ``pairs``."""
    from lm_eval.api.instance import Instance

    captured = []
    lm._loglikelihood_tokens = lambda requests, disable_tqdm=False: captured.extend(requests) or []
    lm.loglikelihood([Instance("loglikelihood", {}, pair, idx) for idx, pair in enumerate(pairs)], disable_tqdm=True)
    return [(tuple(context), tuple(continuation)) for _, context, continuation in captured]


@pytest.mark.parametrize("add_bos_token", [None, True, False])
def test_requests_are_lm_evaluation_harness_s_token_for_token(mistral_llama, add_bos_token):
    lm = harness(mistral_llama, **({} if add_bos_token is None else {"add_bos_token": add_bos_token}))
    conventions = ModelSpec.parse(mistral_llama, add_bos_token=add_bos_token).conventions()
    ours = [conventions.pair(context, continuation) for context, continuation in PAIRS]
    assert [(q.context, q.continuation) for q in ours] == harness_pairs(lm, PAIRS)
    for text in TEXTS:
        assert conventions.document(text) == lm.tok_encode(text)  # rolling windows' tokens
        if text:
            assert list(conventions.prompt(text)) == lm.tok_batch_encode([text])[0][0].tolist()  # generation
    assert conventions.prefix_token_id == lm.prefix_token_id == 1
    if add_bos_token is not False:
        assert ours[0].context[0] == 1 and ours[4].context.count(1) == 1
        # A whitespace-only context is BOS alone, the whitespace moving to the continuation (without
        # BOS, lm-evaluation-harness's encoding refuses such a context: it has no tokens).
        blank = [("\n", "Paris"), (" ", "Paris"), ("\n\n", " Paris")]
        assert [(q.context, q.continuation) for q in (conventions.pair(*p) for p in blank)] == harness_pairs(lm, blank)


def test_gpt2_style_tokenizers_encode_as_before():
    """The demo's tokenizer adds no special token: our encodings are the ones without any."""
    conventions = ModelSpec.parse(TINY_MODEL).conventions()
    tokenizer = conventions.tokenizer
    for context, continuation in PAIRS[:2]:
        query = conventions.pair(context, continuation)
        whole = tokenizer.encode(context.rstrip() + context[len(context.rstrip()):] + continuation,
                                 add_special_tokens=False)
        assert list(query.context + query.continuation) == whole
    assert conventions.pair("", "yes").context == (tokenizer.eos_token_id,)
    assert not conventions.adds_special_tokens()
    assert ModelSpec.parse(TINY_MODEL).conventions_key() is None


@pytest.fixture(scope="module")
def include_paths(tmp_path_factory):
    """Task YAMLs: lm-evaluation-harness's PIQA on the demo's validation questions, its WikiText
    on our pages, and the GSM8K-like 2-shot generation task, each reading local files."""
    piqa = tmp_path_factory.mktemp("bos_piqa")
    (piqa / "local_piqa.yaml").write_text("\n".join([
        "task: local_piqa", f"include: {LM_EVAL_TASKS / 'piqa' / 'piqa.yaml'}", "dataset_path: json",
        "dataset_name: null", f"dataset_kwargs: {{data_files: {json.dumps({'validation': str(TINY / 'validation.jsonl')})}}}",
        "training_split: null", "test_split: null",
    ]) + "\n")
    perplexity = tmp_path_factory.mktemp("bos_perplexity")
    write_perplexity_yamls(perplexity)
    generation = copy_generation_yamls(tmp_path_factory.mktemp("bos_generation"))
    return {"local_piqa": str(piqa), "local_wikitext": str(perplexity), "local_gen_arith": generation}


#: task -> (split, shots, instances)
TASKS = {"local_piqa": ("validation", 0, 48), "local_wikitext": ("test", 0, None), "local_gen_arith": ("validation", 2, 6)}


@pytest.fixture(scope="module")
def harness_runs(mistral_llama, include_paths):
    """lm-evaluation-harness's own run of each task at its defaults (``add_bos_token`` unset)."""
    lm, runs = harness(mistral_llama), {}
    for name, (_, shots, limit) in TASKS.items():
        results = lm_eval.simple_evaluate(
            model=lm, tasks=[name], num_fewshot=shots, task_manager=task_manager(include_paths[name], False),
            log_samples=True, limit=limit, bootstrap_iters=0, fewshot_random_seed=1234,
        )
        runs[name] = results["results"][name], sorted(results["samples"][name], key=lambda s: s["doc_id"])
    return runs


def our_predictions(model, include_paths, name, tmp_path, **settings):
    split, shots, limit = TASKS[name]
    task = LmEvalTask(task=name, include_path=include_paths[name], include_defaults=False, num_shots=shots)
    step = PredictStep(model=model, task=task, split=split, limit=limit, device="cpu", step_name="p", **settings)
    return step.result(LocalWorkspace(tmp_path))


def test_multiple_choice_log_likelihoods_are_lm_evaluation_harness_s(mistral_llama, include_paths, harness_runs, tmp_path):
    ours = our_predictions(mistral_llama, include_paths, "local_piqa", tmp_path)
    results, samples = harness_runs["local_piqa"]
    theirs = [[response[0][0] for response in sample["resps"]] for sample in samples]
    assert len(ours) == len(theirs) == 48
    for record, logliks in zip(ours, theirs):
        assert record["logliks"] == pytest.approx(logliks, abs=1e-4)
    metrics = CalculateMetricsStep(predictions=ours).run(predictions=ours)
    assert metrics["acc"] == results["acc,none"] and metrics["acc_norm"] == results["acc_norm,none"]
    # Without the BOS (what we computed before), the numbers are not lm-evaluation-harness's.
    without = our_predictions(mistral_llama, include_paths, "local_piqa", tmp_path, add_bos_token=False)
    gaps = [abs(a - b) for r, w in zip(ours, without) for a, b in zip(r["logliks"], w["logliks"])]
    assert max(gaps) > 0.1


def test_rolling_perplexity_is_lm_evaluation_harness_s(mistral_llama, include_paths, harness_runs, tmp_path):
    ours = our_predictions(mistral_llama, include_paths, "local_wikitext", tmp_path)
    metrics = CalculateMetricsStep(predictions=ours).run(predictions=ours)
    results, _ = harness_runs["local_wikitext"]
    for metric in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        assert metrics[metric] == pytest.approx(results[f"{metric},none"], rel=1e-5)


def test_generations_are_lm_evaluation_harness_s(mistral_llama, include_paths, harness_runs, tmp_path):
    ours = our_predictions(mistral_llama, include_paths, "local_gen_arith", tmp_path)
    _, samples = harness_runs["local_gen_arith"]
    by_doc = {}
    for sample in samples:  # one per document and filter
        by_doc.setdefault(sample["doc_id"], sample)
    assert len(ours) == len(by_doc) == 6
    assert [r["generation"] for r in ours] == [by_doc[n]["resps"][0][0] for n in sorted(by_doc)]
    assert any(r["generation"] for r in ours)


def test_a_bos_adding_model_s_cache_keys_say_so(mistral_llama):
    """A prediction or fine-tune of a BOS-adding model computed before the special tokens were
    added (same settings) is not this one: its key differs; GPT-2's keys hold nothing new."""
    task = None  # the model's part of the key is what is checked
    keys = {bos: PredictStep(model=mistral_llama, task=task, add_bos_token=bos).unique_id for bos in (None, False, True)}
    assert len(set(keys.values())) == 3
    model = PredictStep(model=mistral_llama, task=task).kwargs["model"]
    # A whitespace-only context's BOS was once scored as its continuation's: those results are not these.
    expected = {"special_tokens": "lm-eval 0.4.13",
                "whitespace_context": "a whitespace-only context is the prefix token alone"}
    assert model.conventions == expected and model.det_hash_object()[-1] == expected
    tiny = PredictStep(model=TINY_MODEL, task=task).kwargs["model"]
    assert tiny.conventions is None and len(tiny.det_hash_object()) == 2
    with pytest.raises(ConfigurationError, match="add_bos_token must be"):
        PredictStep(model=mistral_llama, task=task, add_bos_token="yes")


def test_a_fine_tuned_model_keeps_its_setting(mistral_llama, tmp_path):
    """Fine-tuning with ``add_bos_token: false`` trains without BOS; the model predicts without it."""
    from catwalk_steps.tasks import PiqaTask

    task = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
    step = FinetuneStep(model=mistral_llama, tasks=[task], add_bos_token=False, batch_size=8, train_limit=8,
                        validation_limit=8, train_epochs=1, device="cpu", step_name="f")
    assert step.unique_id != FinetuneStep(model=mistral_llama, tasks=[task], batch_size=8, train_limit=8,
                                          validation_limit=8, train_epochs=1, device="cpu").unique_id
    model = step.result(LocalWorkspace(tmp_path))
    assert model.spec.add_bos_token is False
    assert model.spec.conventions().pair("Q:", " a").context[0] != 1
    assert ModelSpec.parse(mistral_llama).conventions().pair("Q:", " a").context[0] == 1  # the default adds it


def test_the_key_reads_the_files_as_the_tokenizer_encodes(mistral_llama, chat_llama, tmp_path):
    """Whether a model's key carries the mark is read from its files without transformers (graph
    builds stay quick); it agrees with the loaded tokenizer's encodings for every kind we have."""
    from catwalk_steps.models.conventions import adds_special_tokens_on_disk
    from catwalk_steps.models.loading import ModelSpec

    from .tiny_models import tiny_architecture

    models = [TINY_MODEL, mistral_llama, chat_llama, f"rc::{TINY / 'chat-model'}"]
    models += [f"rc::{tiny_architecture(tmp_path / name, name, TINY / 'model')}" for name in ("t5", "llama")]
    for model in models:
        spec = ModelSpec.parse(model)
        found = adds_special_tokens_on_disk(spec.file_here)
        settings = spec.file_here("tokenizer", "tokenizer_config.json")
        applied_on_load = settings is not None and {"add_bos_token", "add_eos_token"} & set(json.loads(settings.read_text()))
        if applied_on_load:  # the files cannot say: the key falls back to the loaded tokenizer
            assert found is None, model
        else:
            assert found is spec.conventions().adds_special_tokens(), model
    assert [ModelSpec.parse(m).conventions_key() is not None for m in models] == [False, True, True, True, True, False]
    assert ModelSpec.parse(models[4]).conventions_key() == {
        "encoder_decoder": "lm-eval 0.4.13 seq2seq: context with its special tokens cut to the window, continuation apart"}
    assert adds_special_tokens_on_disk(ModelSpec.parse("rc::no-such/model").file_here) is None
