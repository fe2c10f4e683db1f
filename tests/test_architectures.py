"""Today's architectures through every path: tiny random models built from transformers' own
config classes (Llama, Mistral, Qwen2, Qwen3, OLMo 2, Gemma 2, Phi-3, GPT-2; T5 as the
encoder-decoder) through ``catwalk::predict``'s multiple-choice scoring, generation and rolling
perplexity against lm-evaluation-harness's HFLM on the same model, the batch-size invariance of
those predictions, and fine-tuning (full and LoRA) on 1 and 2 workers (FSDP too). The decoder-only
models use the chat demo's tokenizer (BOS-adding, no pad token, a chat template); GPT-2 and T5
the demo's GPT-2-style one. Our code names no architecture: what differs comes from the config.

The quick run keeps Llama on every path and Gemma 2's scoring; ``--full`` runs the whole matrix."""

import pytest
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep, PredictStep
from catwalk_steps.tasks import GenerationTask, PerplexityTask, PiqaTask

from .conftest import TINY
from .test_training_invariance import WEIGHT_TOLERANCE, largest_difference
from .tiny_models import ARCHITECTURES, tiny_architecture

lm_eval = pytest.importorskip("lm_eval")

DECODERS = [name for name in ARCHITECTURES if name != "t5"]
QUICK = {"llama", "gemma2"}
#: peft has no default LoRA modules for these model types (our error says so and names the fix).
NO_PEFT_DEFAULT = {"olmo2", "phi3"}
PIQA = PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})
ANSWERS = GenerationTask(data_files={s: str(TINY / "generation" / f"{s}.jsonl") for s in ("train", "validation")},
                         until=["\n"], max_new_tokens=6)
DOCUMENTS = PerplexityTask(data_files={"validation": str(TINY / "perplexity" / "documents.jsonl")})


def matrix(names, quick=QUICK):
    return [pytest.param(name, marks=() if name in quick else pytest.mark.full) for name in names]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each architecture's tiny model, built once per module, by name."""
    models = {}

    def build(name: str) -> str:
        if name not in models:
            tokenizer = TINY / ("model" if name in ("gpt2", "t5") else "chat-model")
            models[name] = f"rc::{tiny_architecture(tmp_path_factory.mktemp(name), name, tokenizer)}"
        return models[name]

    return build


def predict(model, task, tmp_path, **settings):
    settings = {"limit": 8, "device": "cpu", **settings}
    return PredictStep(model=model, task=task, step_name="p", **settings).result(LocalWorkspace(tmp_path))


def harness(model: str):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=model.removeprefix("rc::"), device="cpu", batch_size=8, dtype="float32")


@pytest.mark.parametrize("name", matrix(DECODERS))
def test_every_request_type_is_lm_evaluation_harness_s(built, name, tmp_path):
    from lm_eval.api.instance import Instance

    model = built(name)
    lm = harness(model)
    instances = PIQA.instances("validation", limit=8)
    pairs = [pair for instance in instances for pair in instance.pairs()]
    theirs = [ll for ll, _ in lm.loglikelihood([Instance("loglikelihood", {}, p, n) for n, p in enumerate(pairs)],
                                              disable_tqdm=True)]
    ours = [ll for record in predict(model, PIQA, tmp_path / "mc") for ll in record["logliks"]]
    assert ours == pytest.approx(theirs, abs=1e-4)

    prompts = ANSWERS.instances("validation", limit=8)
    kwargs = {"until": ["\n"], "max_gen_toks": 6, "do_sample": False}
    theirs = lm.generate_until([Instance("generate_until", {}, (i.prompt, kwargs), n) for n, i in enumerate(prompts)],
                               disable_tqdm=True)
    assert [r["generation"] for r in predict(model, ANSWERS, tmp_path / "gen")] == theirs

    documents = DOCUMENTS.instances("validation")
    theirs = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (d.text,), n)
                                       for n, d in enumerate(documents)], disable_tqdm=True)
    ours = [r["loglik"] for r in predict(model, DOCUMENTS, tmp_path / "ppl", limit=None)]
    assert ours == pytest.approx(theirs, abs=1e-3)


@pytest.mark.parametrize("name", matrix(ARCHITECTURES, quick={"llama"}))
def test_predictions_do_not_depend_on_the_batch_size(built, name, tmp_path):
    model = built(name)
    one, many = (predict(model, PIQA, tmp_path / str(size), max_batch_size=size) for size in (1, 16))
    # A random model's sums reach -1,000 nats, where float32's spacing (1.2e-4) exceeds 1e-4: the
    # relative bound (1e-6, a few float32 steps) holds them; abs=1e-4 the small ones.
    assert [ll for r in one for ll in r["logliks"]] == pytest.approx([ll for r in many for ll in r["logliks"]],
                                                                     rel=1e-6, abs=1e-4)
    one, many = (predict(model, ANSWERS, tmp_path / f"g{size}", max_batch_size=size) for size in (1, 8))
    assert [r["generation"] for r in one] == [r["generation"] for r in many]


def finetune(model, device_count=1, **extra) -> FinetuneStep:
    settings = dict(model=model, tasks=[PIQA], batch_size=8, micro_batch_size=2, train_epochs=1, train_limit=16,
                    validation_limit=8, learning_rate=1e-3, device_count=device_count, step_name="f")
    return FinetuneStep(**{**settings, **extra})


@pytest.mark.ddp
@pytest.mark.parametrize("adapter", [None, pytest.param("lora", marks=pytest.mark.full)])  # quick: test_adapters
@pytest.mark.parametrize("name", matrix(ARCHITECTURES, quick={"llama"}))
def test_one_and_two_workers_fine_tune_the_same_model(built, name, adapter, tmp_path):
    if adapter is not None:
        adapter = {"type": "lora", "r": 4, **({"target_modules": "all-linear"} if name in NO_PEFT_DEFAULT else {})}
    model = built(name)
    strategies = ["ddp", "fsdp"] if name == "llama" else ["ddp"]
    one = finetune(model, adapter=adapter).result(LocalWorkspace(tmp_path / "one"))
    for strategy in strategies:
        two = finetune(model, 2, adapter=adapter, strategy=strategy).result(LocalWorkspace(tmp_path / strategy))
        worst = largest_difference(one.state_dict, two.state_dict)
        print(f"{name} {strategy} {adapter}: 1 vs 2 workers, largest weight difference {worst:.1e}")
        assert worst < WEIGHT_TOLERANCE


def test_a_model_type_without_peft_defaults_gets_a_clear_error(built, tmp_path):
    from tango.common.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="peft knows no default modules for model type 'phi3'.*all-linear"):
        finetune(built("phi3"), adapter={"type": "lora", "r": 4}).result(LocalWorkspace(tmp_path))
