"""Chat templates on ``catwalk::predict`` against lm-evaluation-harness 0.4.13's
``--apply_chat_template`` / ``--system_instruction`` / ``--fewshot_as_multiturn``: the same prompts
for lm_eval tasks (multiple choice with a 1-shot PIQA, 2-shot generation), the same numbers on a
tiny Llama whose tokenizer is Mistral's with Zephyr's template (and Mistral Instruct's, which
writes its own BOS and refuses a system turn), native tasks built the same way (native ``lambada``
as lm-eval's ``lambada_openai``), and settings that cannot be met refused when the step graph is
built."""

import json
from pathlib import Path

import pytest
from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace

from catwalk_steps import CalculateMetricsStep, PredictStep
from catwalk_steps.models.chat_templates import chat_renderer
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.tasks import GenerationTask, LambadaTask, LmEvalTask, PiqaTask
from catwalk_steps.tasks.chat import ChatFormat
from catwalk_steps.tasks.lm_eval_bridge import task_manager

from .conftest import TINY, write_jsonl

lm_eval = pytest.importorskip("lm_eval")
from .lm_eval_docs import LM_EVAL_TASKS, copy_generation_yamls  # noqa: E402  (imports lm_eval)

SYSTEM = "You are a careful assistant."
#: (template, system instruction, multi-turn): Zephyr's with a system turn, folded demonstrations,
#: and Mistral Instruct's (no system turn: lm-evaluation-harness drops it and retries).
SETTINGS = [(True, SYSTEM, True), (True, None, False), ("mistral", SYSTEM, True)]
LAMBADA = LambadaTask(data_files={"test": str(TINY / "perplexity" / "lambada_test.jsonl")})


@pytest.fixture(scope="module")
def include_path(tmp_path_factory) -> str:
    directory = Path(copy_generation_yamls(tmp_path_factory.mktemp("chat_tasks")))
    files = {"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")}
    (directory / "piqa_chat.yaml").write_text("\n".join([
        "task: local_piqa_chat", f"include: {LM_EVAL_TASKS / 'piqa' / 'piqa.yaml'}", "dataset_path: json",
        "dataset_name: null", f"dataset_kwargs: {{data_files: {json.dumps(files)}}}", "test_split: null",
        'description: "Pick the better way to reach the goal."',
    ]) + "\n")
    lambada = {"test": str(TINY / "perplexity" / "lambada_test.jsonl")}
    (directory / "lambada_chat.yaml").write_text("\n".join([  # a loglikelihood task (its last word)
        "task: local_lambada_chat", f"include: {LM_EVAL_TASKS / 'lambada' / 'lambada_openai.yaml'}", "tag: []",
        "dataset_path: json", "dataset_name: null", f"dataset_kwargs: {{data_files: {json.dumps(lambada)}}}",
        "training_split: null", "validation_split: null", "test_split: test",
    ]) + "\n")
    return str(directory)


@pytest.fixture(scope="module")
def mistral_default_llama(chat_llama, tmp_path_factory) -> str:
    """``chat_llama`` with Mistral Instruct's template (its ``mistral``) as its only, default one."""
    import shutil

    from transformers import AutoTokenizer

    from .tiny_models import MISTRAL_INSTRUCT_TEMPLATE

    directory = tmp_path_factory.mktemp("mistral-default")
    shutil.copytree(chat_llama.removeprefix("rc::"), directory, dirs_exist_ok=True)
    (directory / "chat_template.jinja").unlink(missing_ok=True)
    shutil.rmtree(directory / "additional_chat_templates", ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(chat_llama.removeprefix("rc::"))
    tokenizer.chat_template = MISTRAL_INSTRUCT_TEMPLATE
    tokenizer.save_pretrained(directory)
    return f"rc::{directory}"


def harness(model: str):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=model.removeprefix("rc::"), device="cpu", batch_size=32, dtype="float32")


def harness_requests(lm, include_path, name, shots, template, system, multiturn):
    """lm-evaluation-harness's requests under a chat template, as its evaluator builds them."""
    task = task_manager(include_path, False).load(name)["tasks"][name]
    task.set_config("num_fewshot", shots)
    task.set_fewshot_seed(1234)
    task.build_all_requests(limit=4, apply_chat_template=True, system_instruction=system,
                            fewshot_as_multiturn=multiturn, chat_template=lm.apply_chat_template)
    return [request.arguments for request in task.instances]


@pytest.mark.parametrize("template, system, multiturn", SETTINGS)
@pytest.mark.parametrize("name, shots", [("local_piqa_chat", 1), ("local_gen_arith", 2), ("local_lambada_chat", 0)])
def test_prompts_are_lm_evaluation_harness_s(chat_llama, mistral_default_llama, include_path, name, shots, template,
                                             system, multiturn):
    # lm-eval 0.4.13 at its defaults renders a tokenizer's default template whatever name it is
    # given: the reference for a named template is the same model with that template as its default.
    lm = harness(mistral_default_llama if isinstance(template, str) else chat_llama)
    theirs = harness_requests(lm, include_path, name, shots, template, system, multiturn)
    conventions = ModelSpec.parse(chat_llama).conventions()
    chat = ChatFormat(chat_renderer(conventions.tokenizer, template), system, multiturn)
    task = LmEvalTask(task=name, include_path=include_path, include_defaults=False, num_shots=shots)
    instances = task.instances("test" if name == "local_lambada_chat" else "validation", limit=4, chat=chat)
    if task.REQUEST_TYPE == "multiple_choice":
        assert [pair for i in instances for pair in i.pairs()] == theirs
        assert all(continuation[0] != " " for _, continuation in theirs)  # no target delimiter under a template
    elif task.REQUEST_TYPE == "loglikelihood":
        assert [(i.context, i.target) for i in instances] == theirs
        # Our own lambada is lm-eval's lambada_openai here too: the passage the user's turn, the
        # last word (its space kept) after the generation prompt; with Mistral's BOS-adding
        # tokenizer one BOS begins each context, whether the template writes none or its own.
        native = LAMBADA.instances("test", limit=4, chat=chat)
        assert [(i.context, i.target) for i in native] == theirs
        bos = conventions.tokenizer.bos_token_id
        for instance in native:
            context = conventions.pair(instance.context, instance.target).context
            assert context[0] == bos and context[1] != bos
    else:
        assert [i.prompt for i in instances] == [prompt for prompt, _ in theirs]
    first = theirs[0][0]
    assert ("<|user|>" in first) == (template is True) and ("[INST]" in first) == (template == "mistral")
    assert (SYSTEM in first) == (system is not None and template is True)


@pytest.fixture(scope="module")
def harness_chat_runs(chat_llama, include_path):
    """lm-evaluation-harness's own runs with ``--apply_chat_template --system_instruction``."""
    runs = {}
    for name, shots, limit in (("local_piqa_chat", 1, 24), ("local_gen_arith", 2, 6), ("local_lambada_chat", 0, 8)):
        results = lm_eval.simple_evaluate(
            model=harness(chat_llama), tasks=[name], num_fewshot=shots, limit=limit, log_samples=True,
            task_manager=task_manager(include_path, False), apply_chat_template=True, system_instruction=SYSTEM,
            bootstrap_iters=0, fewshot_random_seed=1234,
        )
        runs[name] = results["results"][name], sorted(results["samples"][name], key=lambda s: s["doc_id"])
    return runs


def chat_predictions(model, include_path, name, shots, limit, tmp_path, split="validation"):
    task = LmEvalTask(task=name, include_path=include_path, include_defaults=False, num_shots=shots)
    step = PredictStep(model=model, task=task, split=split, limit=limit, device="cpu", apply_chat_template=True,
                       system_instruction=SYSTEM, step_name="p")
    return step.result(LocalWorkspace(tmp_path))


def test_numbers_are_lm_evaluation_harness_s(chat_llama, include_path, harness_chat_runs, tmp_path):
    ours = chat_predictions(chat_llama, include_path, "local_piqa_chat", 1, 24, tmp_path)
    results, samples = harness_chat_runs["local_piqa_chat"]
    for record, sample in zip(ours, samples):
        assert record["logliks"] == pytest.approx([r[0][0] for r in sample["resps"]], abs=1e-4)
    metrics = CalculateMetricsStep(predictions=ours).run(predictions=ours)
    assert metrics["acc"] == results["acc,none"] and metrics["num_shots"] == 1

    generated = chat_predictions(chat_llama, include_path, "local_gen_arith", 2, 6, tmp_path)
    _, samples = harness_chat_runs["local_gen_arith"]
    by_doc = {}
    for sample in samples:
        by_doc.setdefault(sample["doc_id"], sample)
    assert [r["generation"] for r in generated] == [by_doc[n]["resps"][0][0] for n in sorted(by_doc)]

    # A loglikelihood task (LAMBADA's last word) under the template, as lm-eval builds it.
    targets = chat_predictions(chat_llama, include_path, "local_lambada_chat", 0, 8, tmp_path, split="test")
    results, samples = harness_chat_runs["local_lambada_chat"]
    assert [r["loglik"] for r in targets] == pytest.approx([s["resps"][0][0][0] for s in samples], abs=1e-4)
    assert [r["is_greedy"] for r in targets] == [s["resps"][0][0][1] for s in samples]
    assert CalculateMetricsStep(predictions=targets).run(predictions=targets)["acc"] == results["acc,none"]


def test_native_tasks_prompt_as_lm_evaluation_harness_under_a_template(chat_llama, include_path):
    """Zero-shot native PIQA is lm-evaluation-harness's PIQA, so its chat prompts are too."""
    lm = harness(chat_llama)
    task = task_manager(include_path, False).load("local_piqa_chat")["tasks"]["local_piqa_chat"]
    task.config.description = ""  # our PIQA has no description
    task.build_all_requests(limit=4, apply_chat_template=True, system_instruction=SYSTEM,
                            fewshot_as_multiturn=True, chat_template=lm.apply_chat_template)
    theirs = [request.arguments for request in task.instances]
    chat = ChatFormat(chat_renderer(ModelSpec.parse(chat_llama).load_tokenizer(), True), SYSTEM, True)
    piqa = PiqaTask(data_files={"validation": str(TINY / "validation.jsonl")})
    assert [pair for i in piqa.instances("validation", limit=4, chat=chat) for pair in i.pairs()] == theirs


def test_native_lambada_scores_as_lm_evaluation_harness_under_a_template(chat_llama, harness_chat_runs, tmp_path):
    step = PredictStep(model=chat_llama, task=LAMBADA, split="test", limit=8, device="cpu", apply_chat_template=True,
                       system_instruction=SYSTEM, step_name="p")
    ours = step.result(LocalWorkspace(tmp_path))
    results, samples = harness_chat_runs["local_lambada_chat"]
    assert [r["loglik"] for r in ours] == pytest.approx([s["resps"][0][0][0] for s in samples], abs=1e-4)
    assert [r["is_greedy"] for r in ours] == [s["resps"][0][0][1] for s in samples]
    assert CalculateMetricsStep(predictions=ours).run(predictions=ours)["acc"] == results["acc,none"]


def test_native_demonstrations_are_turns_or_one_folded_turn(tmp_path):
    rows = [{"prompt": f"Q: {n} + {n}?", "answers": [str(2 * n)]} for n in range(4)]
    data = {"train": str(write_jsonl(tmp_path / "train.jsonl", rows)),
            "validation": str(write_jsonl(tmp_path / "validation.jsonl", rows[:1]))}
    task = GenerationTask(data_files=data, num_shots=2, fewshot_split="train")
    seen = []
    chat = ChatFormat(lambda messages, *_, **__: seen.append(messages) or "rendered", "Sys", True)
    (instance,) = task.instances("validation", chat=chat)
    assert instance.prompt == "rendered"
    (prompt,) = seen  # rendered to the prompt; the conversation with the answer closing it is kept to learn
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert prompt[-1]["content"] == "Q: 0 + 0?" and prompt[2]["content"] in {"2", "4", "6"}
    assert instance.messages == tuple((m["role"], m["content"]) for m in prompt) + (("assistant", "0"),)
    assert instance.prompt_turns == len(prompt)  # a prompt/completion conversation: the answer alone is learnt
    folded = ChatFormat(chat.render, None, False)
    (plain,) = task.instances("validation")
    task.instances("validation", chat=folded)
    assert seen[-1] == [{"role": "user", "content": plain.prompt}]  # the plain prompt, one user turn


def test_settings_that_cannot_be_met_are_refused_at_graph_build(mistral_llama, chat_llama, tmp_path):
    piqa = PiqaTask(data_files={"validation": str(TINY / "validation.jsonl")})
    with pytest.raises(ConfigurationError, match="has no chat template.*base model"):
        PredictStep(model=mistral_llama, task=piqa, apply_chat_template=True)
    with pytest.raises(ConfigurationError, match="no chat template named 'chatml' \\(has: default, mistral\\)"):
        PredictStep(model=chat_llama, task=piqa, apply_chat_template="chatml")
    with pytest.raises(ConfigurationError, match="system_instruction is a chat setting"):
        PredictStep(model=chat_llama, task=piqa, system_instruction=SYSTEM)
    with pytest.raises(ConfigurationError, match="acc_uncond"):
        PredictStep(model=chat_llama, task=piqa, apply_chat_template=True, unconditioned=True)
    from catwalk_steps.tasks import PerplexityTask

    documents = PerplexityTask(data_files={"validation": str(TINY / "perplexity" / "documents.jsonl")})
    with pytest.raises(ConfigurationError, match="loglikelihood_rolling requests"):
        PredictStep(model=chat_llama, task=documents, apply_chat_template=True)
    keys = {PredictStep(model=chat_llama, task=piqa, **s).unique_id
            for s in ({}, {"apply_chat_template": True}, {"apply_chat_template": "mistral"},
                      {"apply_chat_template": True, "fewshot_as_multiturn": False})}
    assert len(keys) == 4
