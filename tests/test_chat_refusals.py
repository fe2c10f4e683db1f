"""Every chat setting that is refused when the step graph is built names a way out, and that way
out works: each case below is refused with a message holding its advice, and the same step with
the advice followed is accepted (built, its graph checked, nothing run)."""

from pathlib import Path
from typing import Any, Callable, Dict

import pytest
from tango.common.exceptions import ConfigurationError

from catwalk_steps import FinetuneStep, PredictStep
from catwalk_steps.models.chat_templates import chat_renderer
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.tasks import GenerationTask, LambadaTask, PerplexityTask, PiqaTask

from .conftest import TINY

CHAT = TINY / "chat"
CHAT_MODEL = f"rc::{TINY / 'chat-model'}"
PIQA = PiqaTask(data_files={"validation": str(TINY / "validation.jsonl")})
CONVERSATIONS = GenerationTask(data_files={split: str(CHAT / f"{split}.jsonl") for split in ("train", "validation")})
ANSWERS = GenerationTask(data_files={split: str(TINY / "generation" / f"{split}.jsonl")
                                     for split in ("train", "validation")})
DOCUMENTS = PerplexityTask(data_files={"validation": str(TINY / "perplexity" / "documents.jsonl")})
LAMBADA = LambadaTask(data_files={"test": str(TINY / "perplexity" / "lambada_test.jsonl")})


@pytest.fixture(scope="module")
def models(chat_llama, mistral_llama) -> Dict[str, Any]:
    """Specs, a chat tokenizer for the template-less model's vocabulary, and fine-tuning steps
    (built, not run) of a chat model under its template and of the template-less model given it."""
    tokenizer = str(Path(chat_llama.removeprefix("rc::")))
    return {
        "chat": chat_llama, "base": mistral_llama, "chat_tokenizer": tokenizer,
        "chat_finetune": FinetuneStep(model=CHAT_MODEL, tasks=[CONVERSATIONS], apply_chat_template=True,
                                      step_name="chat_finetune"),
        "chat_llama_finetune": FinetuneStep(model=chat_llama, tasks=[ANSWERS], apply_chat_template=True,
                                            step_name="chat_llama_finetune"),
        "given_template_finetune": FinetuneStep(model=mistral_llama, tokenizer=tokenizer, tasks=[CONVERSATIONS],
                                                apply_chat_template=True, step_name="given_template_finetune"),
    }


def predict(model: str, task: Any, **settings: Any) -> Callable[[Dict[str, Any]], Any]:
    split = "test" if task is LAMBADA else "validation"
    return lambda m: PredictStep(model=m[model], task=task, split=split,
                                 **{k: m.get(v, v) if k == "tokenizer" else v for k, v in settings.items()})


def finetune(model: str, task: Any, **settings: Any) -> Callable[[Dict[str, Any]], Any]:
    return lambda m: FinetuneStep(model=m[model], tasks=[task],
                                  **{k: m.get(v, v) if k == "tokenizer" else v for k, v in settings.items()})


#: id -> (the refused step, words of the message's advice, the step with the advice followed).
CASES = {
    "bad template value": (predict("chat", PIQA, apply_chat_template=""), "true, false or a template's name",
                           predict("chat", PIQA, apply_chat_template=True)),
    "system_instruction alone": (predict("chat", PIQA, system_instruction="Be brief."), "set apply_chat_template",
                                 predict("chat", PIQA, system_instruction="Be brief.", apply_chat_template=True)),
    "fewshot_as_multiturn alone": (predict("chat", PIQA, fewshot_as_multiturn=False), "set apply_chat_template",
                                   predict("chat", PIQA, fewshot_as_multiturn=False, apply_chat_template=True)),
    "acc_uncond under a template": (predict("chat", PIQA, apply_chat_template=True, unconditioned=True),
                                    "leave it off", predict("chat", PIQA, apply_chat_template=True)),
    "a template name not carried": (predict("chat", PIQA, apply_chat_template="chatml"), "write true",
                                    predict("chat", PIQA, apply_chat_template=True)),
    "no template: plain prompts": (predict("base", PIQA, apply_chat_template=True), "leave apply_chat_template unset",
                                   predict("base", PIQA)),
    "no template: one given": (predict("base", PIQA, apply_chat_template=True), "tokenizer:",
                               predict("base", PIQA, apply_chat_template=True, tokenizer="chat_tokenizer")),
    "conversations, no template": (predict("base", CONVERSATIONS), "tokenizer:",
                                   predict("base", CONVERSATIONS, apply_chat_template=True,
                                           tokenizer="chat_tokenizer")),
    "conversations, a template to set": (predict("chat", CONVERSATIONS), "set apply_chat_template",
                                         predict("chat", CONVERSATIONS, apply_chat_template=True)),
    "conversations with shots": (predict("chat", GenerationTask(data_files=CONVERSATIONS.data_files, num_shots=1),
                                         apply_chat_template=True), "num_shots must be 0",
                                 predict("chat", CONVERSATIONS, apply_chat_template=True)),
    "a chat fine-tune without it": (predict("chat_llama_finetune", ANSWERS, apply_chat_template=False),
                                    "allow_other_template: true",
                                    predict("chat_llama_finetune", ANSWERS, apply_chat_template=False,
                                            allow_other_template=True)),
    "a chat fine-tune under another": (predict("chat_llama_finetune", ANSWERS, apply_chat_template="mistral"),
                                       "allow_other_template: true",
                                       predict("chat_llama_finetune", ANSWERS, apply_chat_template="mistral",
                                               allow_other_template=True)),
    "a chat fine-tune, its own": (predict("chat_llama_finetune", ANSWERS, apply_chat_template=False),
                                  "apply_chat_template unset", predict("chat_llama_finetune", ANSWERS)),
    "a chat fine-tune's conversations without it": (predict("chat_finetune", CONVERSATIONS, apply_chat_template=False),
                                                    "apply_chat_template unset", predict("chat_finetune", CONVERSATIONS)),
    "documents under a template": (predict("chat", DOCUMENTS, apply_chat_template=True), "unset",
                                   predict("chat", DOCUMENTS)),
    "a chat fine-tune's documents": (predict("chat_llama_finetune", DOCUMENTS, apply_chat_template=True), "unset",
                                     predict("chat_llama_finetune", DOCUMENTS)),
    "a chat fine-tune's documents, false": (predict("chat_llama_finetune", DOCUMENTS, apply_chat_template=True),
                                            "or false",
                                            predict("chat_llama_finetune", DOCUMENTS, apply_chat_template=False)),
    "a fine-tune given a template": (predict("base", CONVERSATIONS), "tokenizer:",
                                     predict("given_template_finetune", CONVERSATIONS)),
    "fine-tuning conversations, no template": (finetune("base", CONVERSATIONS), "tokenizer:",
                                               finetune("base", CONVERSATIONS, apply_chat_template=True,
                                                        tokenizer="chat_tokenizer")),
    "fine-tuning conversations, a template to set": (finetune("chat", CONVERSATIONS), "set apply_chat_template",
                                                     finetune("chat", CONVERSATIONS, apply_chat_template=True)),
    "fine-tuning under a template the model lacks": (finetune("base", ANSWERS, apply_chat_template=True), "tokenizer:",
                                                     finetune("base", ANSWERS, apply_chat_template=True,
                                                              tokenizer="chat_tokenizer")),
    "assistant_only_loss alone": (finetune("chat", ANSWERS, assistant_only_loss=False), "needs apply_chat_template",
                                  finetune("chat", ANSWERS, assistant_only_loss=False, apply_chat_template=True)),
}


#: The cases the quick run keeps (the issue's: a chat fine-tune's evaluation without its template,
#: a model without one, documents); the rest load tokenizers for seconds each, under ``--full``.
QUICK = {"a chat fine-tune without it", "a chat fine-tune's conversations without it", "no template: one given",
         "documents under a template", "a chat fine-tune's documents"}


@pytest.mark.parametrize("refused, advice, followed", [
    pytest.param(*case, id=name, marks=() if name in QUICK else pytest.mark.full) for name, case in CASES.items()
])
def test_each_chat_refusal_names_a_way_out_that_works(models, refused, advice, followed):
    with pytest.raises(ConfigurationError) as error:
        refused(models)
    message = str(error.value)
    assert advice in message, message
    assert "\n" not in message
    followed(models)  # accepted when the graph is built


def test_a_chat_fine_tune_is_named_by_its_template_in_words(models):
    with pytest.raises(ConfigurationError, match="fine-tuned under its tokenizer's own chat template: its prompts"):
        PredictStep(model=models["chat_llama_finetune"], task=ANSWERS, apply_chat_template=False)


def test_documents_take_no_template_whatever_the_model_was_trained_under(models):
    """lm-evaluation-harness scores a ``loglikelihood_rolling`` document without a template, with
    ``--apply_chat_template`` or not: so does an evaluation of a chat fine-tune, unset."""
    step = PredictStep(model=models["chat_llama_finetune"], task=DOCUMENTS)
    assert step.kwargs["apply_chat_template"] is False
    assert step.unique_id == PredictStep(model=models["chat_llama_finetune"], task=DOCUMENTS,
                                         apply_chat_template=False).unique_id



def test_a_chat_fine_tune_s_conversations_are_not_told_to_allow_what_they_cannot_take(models):
    """Conversations need a template whatever the model: ``allow_other_template`` does not let
    them go without one, so the refusal does not offer it."""
    with pytest.raises(ConfigurationError) as error:
        PredictStep(model=models["chat_finetune"], task=CONVERSATIONS, apply_chat_template=False)
    assert "allow_other_template" not in str(error.value), error.value


def test_a_template_refusing_a_system_turn_in_training_names_what_it_takes(chat_llama):
    """Training renders strictly (a dropped turn would change the data without a word): the refusal
    says to leave the system turn out or to take a template that has one, and either renders."""
    tokenizer = ModelSpec.parse(chat_llama).load_tokenizer()
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
             {"role": "assistant", "content": "Hello."}]
    with pytest.raises(ConfigurationError, match="leave the system turns out of the rows, or train under a template "
                                                 "that takes them"):
        chat_renderer(tokenizer, "mistral", strict=True)(turns, False)
    assert "[INST] Hi? [/INST]Hello." in chat_renderer(tokenizer, "mistral", strict=True)(turns[1:], False)
    assert "Be brief." in chat_renderer(tokenizer, True, strict=True)(turns, False)
