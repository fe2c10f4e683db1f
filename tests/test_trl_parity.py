"""Fine-tuning on chat data checked against TRL 1.16's ``SFTTrainer`` itself, run beside us on
the same tiny Llama, Mistral-7B v0.1's real SentencePiece tokenizer and the same rows: the
training rows (``trainer.train_dataset``'s ``input_ids`` and ``labels``) equal ours, and one
optimizer step (plain SGD, constant learning rate, no clipping, float32, one batch of every row)
changes the weights as TRL's step changes them, to 1e-5 relative, per tensor.

The matrix: Mistral-style (BOS written by the template, no system turn), Zephyr-style (a newline
after the generation prompt, no BOS), ChatML (Qwen 2.5's), Llama-3-style, and a Vicuna-style
template whose generation prompt ends in a space; rows with system turns and several turns,
prompt/completion rows of strings and of turns, and ``messages`` rows learnt whole (TRL's default)
or by the template's ``{% generation %}`` markers (``assistant_only_loss``, on Qwen 2.5's and
Llama 3's training templates that TRL ships). Our default for ``messages`` rows (each assistant
turn) is checked against TRL's ``assistant_only_loss`` where the markers cover the same text.
"""

import shutil
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch
import transformers

from catwalk_steps import FinetuneStep
from catwalk_steps.steps.finetune import _RUN_DEFAULTS
from catwalk_steps.tasks import GenerationTask
from catwalk_steps.training.preparation import training_job
from catwalk_steps.training.settings import FinetuneSettings

from .conftest import write_jsonl
from .tiny_models import MISTRAL_INSTRUCT_TEMPLATE, ZEPHYR_TEMPLATE

trl = pytest.importorskip("trl")
from trl.chat_template_utils import (  # noqa: E402  (TRL's own copies of the hub templates)
    llama3_chat_template,
    llama3_training_chat_template,
    qwen2_5_chat_template,
    qwen2_5_training_chat_template,
)

#: A Vicuna-style template: its generation prompt ends in a space, which SentencePiece joins to
#: the answer's first word.
VICUNA_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] + ' ' }}{% elif m['role'] == 'user' %}"
    "{{ 'USER: ' + m['content'] + ' ' }}{% else %}{{ 'ASSISTANT: ' + m['content'] + eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT: ' }}{% endif %}"
)
TEMPLATES = {
    "mistral": MISTRAL_INSTRUCT_TEMPLATE, "zephyr": ZEPHYR_TEMPLATE, "chatml": qwen2_5_chat_template,
    "llama3": llama3_chat_template, "vicuna": VICUNA_TEMPLATE,
    "chatml-training": qwen2_5_training_chat_template, "llama3-training": llama3_training_chat_template,
}
#: Whether transformers' Trainer counts the first position's label in ``num_items_in_batch``.
TRAINER_COUNTS_POSITION_0 = int(transformers.__version__.split(".")[0]) < 5
LEARNING_RATE = 10.0  # large, so that float32 rounding of weights near 1.0 stays far below the tolerance
TOLERANCE = 1e-5

QUESTIONS = [("What do you use to cut bread?", "a sharp knife"), ("And to dry the dishes?", "a clean towel"),
             ("What opens the door?", "the key"), ("What is 2 + 2?", "4"), ("Which tool drives nails?", "a hammer"),
             ("What holds water?", "a bucket")]


def messages_rows(system: bool) -> List[Dict[str, Any]]:
    """Conversations of one to three exchanges, some with a system turn."""
    rows = []
    for number in range(6):
        turns = [{"role": "system", "content": "Answer in a few words."}] if system and number % 2 == 0 else []
        for question, answer in (QUESTIONS[number:] + QUESTIONS[:number])[:1 + number % 3]:
            turns += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        rows.append({"messages": turns})
    return rows


def conversational_completion_rows(system: bool) -> List[Dict[str, Any]]:
    return [{"prompt": row["messages"][:-1], "completion": row["messages"][-1:]} for row in messages_rows(system)]


def plain_completion_rows() -> List[Dict[str, Any]]:
    return [{"prompt": f"Question: {q}\nAnswer:", "completion": f" {a}"} for q, a in QUESTIONS[:3]] + \
        [{"prompt": f"Q: {q}\nA: ", "completion": a} for q, a in QUESTIONS[3:]]


#: (template, rows, our settings, TRL's settings): every case must give TRL's rows and step. Zephyr
#: and Vicuna (whitespace after the generation prompt) meet both conversational formats; Mistral's
#: (BOS in the template), ChatML and Llama 3 one or two each, the code being one path for all
#: (kept to these for the --full run's time).
CASES = {
    "mistral-messages": ("mistral", lambda: messages_rows(False), dict(assistant_only_loss=False), {}),
    "zephyr-messages": ("zephyr", lambda: messages_rows(True), dict(assistant_only_loss=False), {}),
    "zephyr-completion": ("zephyr", lambda: conversational_completion_rows(True), {}, {}),
    "chatml-completion": ("chatml", lambda: conversational_completion_rows(True), {}, {}),
    "chatml-completion-whole": ("chatml", lambda: conversational_completion_rows(True),
                                dict(completion_only_loss=False), dict(completion_only_loss=False)),
    "llama3-messages": ("llama3", lambda: messages_rows(True), dict(assistant_only_loss=False), {}),
    "vicuna-messages": ("vicuna", lambda: messages_rows(True), dict(assistant_only_loss=False), {}),
    "vicuna-completion": ("vicuna", lambda: conversational_completion_rows(True), {}, {}),
    "plain-completion": (None, plain_completion_rows, {}, {}),
    "plain-completion-whole": (None, plain_completion_rows, dict(completion_only_loss=False),
                               dict(completion_only_loss=False)),
    "chatml-assistant-only": ("chatml-training", lambda: messages_rows(True), dict(assistant_only_loss=True),
                              dict(assistant_only_loss=True)),
    "llama3-assistant-only": ("llama3-training", lambda: messages_rows(True), dict(assistant_only_loss=True),
                              dict(assistant_only_loss=True)),
    # The loss over the learnt tokens of the whole accumulated batch, however it is cut: three
    # micro-batches of two rows on both sides (rows of different lengths and learnt counts).
    "zephyr-messages-accumulated": ("zephyr", lambda: messages_rows(True), dict(assistant_only_loss=False, micro_batch_size=2),
                                    dict(per_device_train_batch_size=2, gradient_accumulation_steps=3)),
    # Our default for messages rows (each assistant turn, end of turn included) is TRL's
    # assistant_only_loss where the markers enclose what follows the generation prompt.
    "llama3-our-default": ("llama3-training", lambda: messages_rows(True), {}, dict(assistant_only_loss=True)),
}
#: The quick run's representative: a BOS-writing template learnt whole (a space after the
#: generation prompt: the quick prompt check below). The rest run under --full.
QUICK = {"mistral-messages"}


@pytest.fixture(scope="module")
def template_models(tmp_path_factory, mistral_tokenizer_path) -> Dict[str, Path]:
    """A tiny Llama (Mistral's tokenizer) with each template as its tokenizer's default; its
    window is TRL's default ``max_length`` (1024), so that neither side cuts a row."""
    from transformers import AutoTokenizer

    from .tiny_models import tiny_llama

    base = tiny_llama(tmp_path_factory.mktemp("llama-1024"), mistral_tokenizer_path, window=1024)
    models = {}
    for name, template in TEMPLATES.items():
        directory = tmp_path_factory.mktemp(f"llama-{name}")
        shutil.copytree(base, directory, dirs_exist_ok=True)
        tokenizer = AutoTokenizer.from_pretrained(base)
        tokenizer.chat_template = template
        tokenizer.save_pretrained(directory)
        models[name] = directory
    models[None] = base
    return models


def trl_trainer(model_dir: Path, data: Path, rows: int, settings: Dict[str, Any], output: Path):
    """TRL's ``SFTTrainer`` at its defaults but for one SGD step over one batch of every row."""
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = trl.SFTConfig(**{
        **dict(output_dir=str(output), use_cpu=True, bf16=False, gradient_checkpointing=False, report_to=[],
               per_device_train_batch_size=rows, max_steps=1, learning_rate=LEARNING_RATE, lr_scheduler_type="constant",
               warmup_steps=0, optim="sgd", weight_decay=0.0, max_grad_norm=0.0, save_strategy="no",
               logging_strategy="no", dataset_num_proc=None),
        **settings,
    })
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return trl.SFTTrainer(model=model, args=config, processing_class=AutoTokenizer.from_pretrained(model_dir),
                          train_dataset=load_dataset("json", data_files=str(data), split="train"))


def our_step(model_dir: Path, data: Path, rows: int, template: Any, settings: Dict[str, Any]) -> FinetuneStep:
    task = GenerationTask(data_files={"train": str(data)}, until=[], max_new_tokens=8)
    chat = {} if template is None else {"apply_chat_template": True}
    return FinetuneStep(
        model=f"rc::{model_dir}", tasks=[task], batch_size=rows, train_epochs=1, validation_split=None,
        optimizer={"type": "torch::SGD", "lr": LEARNING_RATE}, lr_scheduler={"type": "torch::ConstantLR", "factor": 1.0},
        max_grad_norm=None, **chat, **settings,
    )


def our_rows(step: FinetuneStep, tmp_path: Path) -> List[Tuple[List[int], List[int]]]:
    """Our training rows as TRL writes them: input ids, and labels with -100 where nothing is learnt."""
    from tango.workspaces import LocalWorkspace

    settings = FinetuneSettings(**{**_RUN_DEFAULTS, **step.kwargs})
    job = training_job(settings, work_dir=tmp_path, workspace=LocalWorkspace(tmp_path / "ws"), step_id="t",
                       step_name="t", tracking=None)
    rows = []
    for example in job.train:
        labels = [-100] * len(example.prompt) + [t if m else -100 for t, m in zip(example.answer, example.answer_mask())]
        rows.append((list(example.prompt + example.answer), labels))
    return rows


@pytest.mark.parametrize("case", [c if c in QUICK else pytest.param(c, marks=pytest.mark.full) for c in CASES])
def test_rows_and_one_step_equal_trl(case, template_models, tmp_path):
    from tango.workspaces import LocalWorkspace

    template, make_rows, ours, theirs = CASES[case]
    rows = make_rows()
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    model_dir = template_models[template]
    trainer = trl_trainer(model_dir, data, len(rows), theirs, tmp_path / "trl")
    step = our_step(model_dir, data, len(rows), template, ours)

    expected = [(list(r["input_ids"]), list(r["labels"])) for r in trainer.train_dataset]
    found = our_rows(step, tmp_path / "rows")
    assert [ids for ids, _ in found] == [ids for ids, _ in expected]
    # Position 0 is never predicted: TRL's label there is unused (its label count skips it too).
    assert [labels[1:] for _, labels in found] == [labels[1:] for _, labels in expected]

    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    result = step.result(LocalWorkspace(tmp_path / "ours")).state_dict
    # transformers before 5 (CI's oldest job: 4.57) counts the label of position 0, which nothing
    # predicts, in the Trainer's divisor (later releases count labels[..., 1:], as we do): one SGD
    # step is then smaller by that count's ratio, which is applied here.
    learnt = sum(label != -100 for _, labels in expected for label in labels[1:])
    counted = learnt + (sum(labels[0] != -100 for _, labels in expected) if TRAINER_COUNTS_POSITION_0 else 0)
    worst = 0.0
    for name, weight in before.items():
        theirs_change = after[name].detach() - weight
        our_change = (result[name].float() - weight) * learnt / counted
        scale = theirs_change.norm().item()
        if scale == 0:  # (embeddings of tokens no row holds)
            assert our_change.norm().item() == 0, name
            continue
        worst = max(worst, (our_change - theirs_change).norm().item() / scale)
    print(f"{case}: largest relative difference of a weight change from TRL's: {worst:.1e}")
    assert worst < TOLERANCE


PROMPT_QUICK = {("vicuna", "messages")}


@pytest.mark.parametrize("template, rows", [
    case if case in PROMPT_QUICK else pytest.param(*case, marks=pytest.mark.full)
    for case in ((t, r) for t in ("mistral", "zephyr", "chatml", "llama3", "vicuna") for r in ("messages", "completion"))
])
def test_a_fine_tuned_model_is_prompted_with_what_training_put_before_its_answer(template, rows, template_models,
                                                                                 tmp_path):
    """A chat fine-tune's evaluation prompt for a row is, token for token, what training put before
    the row's last learnt turn: no BOS the template does not write, and a generation prompt's
    trailing space (Vicuna's ``"ASSISTANT: "``) left to the answer's first token, as training
    learnt it. The one exception, stated in the README: an answer whose first token does not take
    that space in (a digit, under SentencePiece) was learnt after the space as a token of its own."""
    from catwalk_steps.models.chat_templates import template_renderer
    from catwalk_steps.models.prompt_room import generation_requests
    from catwalk_steps.tasks.chat import ChatFormat

    system = template != "mistral"  # (its template refuses system turns)
    data = messages_rows(system) if rows == "messages" else conversational_completion_rows(system)
    task = GenerationTask(data_files={"train": str(write_jsonl(tmp_path / "train.jsonl", data))}, until=[],
                          max_new_tokens=8)
    step = our_step(template_models[template], tmp_path / "train.jsonl", len(data), template, {})
    trained = our_rows(step, tmp_path / "rows")
    spec = FinetuneSettings(**{**_RUN_DEFAULTS, **step.kwargs}).model_spec()  # what the result keeps
    conventions = spec.conventions()
    instances = task.instances("train", chat=ChatFormat(template_renderer(conventions.tokenizer, True, str(spec))))
    prompts = [request.prompt for request in generation_requests(conventions, instances, 1024)]
    for (ids, labels), prompt, instance in zip(trained, prompts, instances):
        last_turn = max(k for k in range(1, len(labels)) if labels[k] != -100 and labels[k - 1] == -100)
        if template == "vicuna" and instance.references[0][0].isdigit():
            assert list(prompt) + [ids[last_turn - 1]] == ids[:last_turn]
            continue
        assert list(prompt) == ids[:last_turn], instance.id
