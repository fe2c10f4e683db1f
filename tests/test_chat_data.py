"""Chat data as TRL takes it (``messages`` and ``prompt``/``completion`` rows) through the
``generation`` task: rows checked turn by turn before any model loads; fine-tuning under the
model's chat template learns every assistant turn as the template writes it (end-of-turn
included) and nothing else, with the promises of every fine-tune (1 vs 2 workers, FSDP, LoRA);
evaluation generates the last assistant turn from the turns before it."""

import json

import pytest
from tango.common.exceptions import ConfigurationError
from tango.common.lazy import Lazy
from tango.workspaces import LocalWorkspace

from catwalk_steps import FinetuneStep, PredictStep
from catwalk_steps.models.chat_templates import chat_renderer
from catwalk_steps.models.loading import ModelSpec
from catwalk_steps.tasks import GenerationTask
from catwalk_steps.tasks.chat import ChatFormat
from catwalk_steps.tasks.instance import DataError
from catwalk_steps.models.answer_rows import answer_row
from catwalk_steps.training.chat_rows import LearntTokens, row_tokens
from catwalk_steps.kinds.generation import answer_examples

from .conftest import TINY, write_jsonl
from .test_generative_finetune import BF16_WEIGHT_TOLERANCE
from .test_training_invariance import WEIGHT_TOLERANCE, Interrupt, RecordStart, largest_difference

CHAT = TINY / "chat"
CHAT_MODEL = f"rc::{TINY / 'chat-model'}"
TWO_TURNS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What do you use to cut it?"},
             {"role": "assistant", "content": "a sharp knife"}, {"role": "user", "content": "And to dry it?"},
             {"role": "assistant", "content": "a clean towel"}]


@pytest.fixture(scope="module")
def chat_task() -> GenerationTask:
    return GenerationTask(data_files={split: str(CHAT / f"{split}.jsonl") for split in ("train", "validation")},
                          until=[], max_new_tokens=8)


def render_format() -> ChatFormat:
    return ChatFormat(chat_renderer(ModelSpec.parse(CHAT_MODEL).load_tokenizer(), True))


def test_each_row_format_becomes_an_instance(tmp_path):
    rows = [
        {"messages": TWO_TURNS},
        {"prompt": [{"role": "user", "content": "Q?"}], "completion": [{"role": "assistant", "content": " A"}]},
    ]
    task = GenerationTask(data_files={"validation": str(write_jsonl(tmp_path / "chat.jsonl", rows))})
    conversation, split_turns = task.instances("validation", chat=render_format())
    assert conversation.references == ["a clean towel"] and len(conversation.messages) == 5
    assert conversation.prompt.endswith("<|user|>\nAnd to dry it?</s>\n<|assistant|>\n")
    assert conversation.prompt.startswith("<|system|>\nBe brief.</s>")
    assert split_turns.references == [" A"] and split_turns.messages == (("user", "Q?"), ("assistant", " A"))
    plain = [{"prompt": "Question: What do you use to cut it?\nAnswer:", "completion": " a sharp knife"}]
    task = GenerationTask(data_files={"validation": str(write_jsonl(tmp_path / "plain.jsonl", plain))})
    (instance,) = task.instances("validation")
    assert (instance.prompt, instance.references, instance.target_delimiter) == (plain[0]["prompt"], [" a sharp knife"], "")


@pytest.mark.parametrize("turns, problem", [
    ([{"role": "robot", "content": "hi"}], "turn 1 has role 'robot': use one of system, user, assistant"),
    ([{"role": "user", "content": "hi"}], "has no assistant turn at its end"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}],
     "turn 2 is a user turn where an assistant turn belongs"),
    ([{"role": "assistant", "content": "a"}], "turn 1 is an assistant turn where a user turn belongs"),
    ([{"role": "user", "content": ["a"]}, {"role": "assistant", "content": "b"}], r"turn 1 \(user\) has content \['a'\]"),
    (["hi", {"role": "assistant", "content": "b"}], "turn 1 must be an object with 'role' and 'content'"),
    ([], "must be a non-empty list"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "..."}], "holds '...', which is empty"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}],
     "turn 2 is a tool call or a tool's answer"),
    ([{"role": "user", "content": "a"}, {"role": "tool", "content": "6"}], "turn 2 is a tool call or a tool's answer"),
    ([{"role": "user", "content": "a", "name": "Ann"}, {"role": "assistant", "content": "b"}],
     "turn 1 \\(user\\) has keys 'name', which catwalk does not pass to the chat template"),
])
def test_bad_conversations_are_refused_before_any_model_loads(tmp_path, monkeypatch, turns, problem):
    from catwalk_steps.models import weights

    monkeypatch.setattr(weights, "load_pretrained", lambda *a, **k: pytest.fail("a model was loaded"))
    good = {"messages": TWO_TURNS}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, {"messages": turns}])
    task = GenerationTask(data_files={"validation": str(path)})
    with pytest.raises(DataError, match=f"bad.jsonl: line 2: field 'messages' {problem}"):
        PredictStep(model=CHAT_MODEL, task=task, apply_chat_template=True).run(
            model=CHAT_MODEL, task=task, apply_chat_template=True)


PROMPT_COMPLETION_TURNS = {"prompt": [{"role": "user", "content": "Q?"}], "completion": [{"role": "assistant", "content": " A"}]}


@pytest.mark.parametrize("row, settings, refused", [
    ({"messages": TWO_TURNS}, dict(completion_only_loss=False),
     "completion_only_loss: false is for prompt/completion rows, and the data has none: what its rows learn is each "
     "assistant turn of a messages row (assistant_only_loss: true or false says otherwise); leave it unset"),
    pytest.param(PROMPT_COMPLETION_TURNS, dict(assistant_only_loss=False),
     "assistant_only_loss: false is for messages rows (it learns their every token), and the data has none: what its "
     "rows learn is a prompt/completion row's completion (completion_only_loss: false says every token); leave it unset",
     marks=pytest.mark.full),
    pytest.param({"prompt": "Q?", "answers": ["A"]}, dict(apply_chat_template=False, completion_only_loss=True),
     "completion_only_loss: true is for prompt/completion rows, and the data has none: what its rows learn is a "
     "prompt's answer (a prompt/answers row, not chat data); leave it unset", marks=pytest.mark.full),
])
def test_a_loss_setting_the_rows_do_not_take_is_refused_before_any_model_loads(tmp_path, monkeypatch, row, settings,
                                                                                 refused):
    """Such a setting got a cache key of its own and trained the same weights bit for bit."""
    from catwalk_steps.models import rank_classification  # (imported first: it binds load_pretrained by name)

    monkeypatch.setattr(rank_classification, "load_pretrained", lambda *a, **k: pytest.fail("a model was loaded"))
    task = GenerationTask(data_files={"train": str(write_jsonl(tmp_path / "rows.jsonl", [row] * 8))}, until=[])
    step = finetune(task, validation_split=None, **settings)
    with pytest.raises(ConfigurationError) as error:
        step.result(LocalWorkspace(tmp_path / "ws"))
    assert str(error.value) == refused


@pytest.mark.parametrize("row, problem", [
    ({"messages": TWO_TURNS, "prompt": "Q?", "completion": "A"}, "field 'messages' is given beside prompt/completion"),
    ({"message": TWO_TURNS}, "field 'message' is not a field catwalk reads: a conversation goes in 'messages'"),
    ({"prompt": [{"role": "user", "content": "Q?"}], "completion": []}, "field 'completion' must be a non-empty list"),
])
def test_rows_that_would_be_read_in_part_are_refused(tmp_path, row, problem):
    task = GenerationTask(data_files={"validation": str(write_jsonl(tmp_path / "rows.jsonl", [row]))})
    with pytest.raises(DataError, match=f"rows.jsonl: line 1: {problem}"):
        task.instances("validation", chat=render_format())


@pytest.mark.full
def test_a_system_turn_the_template_refuses_is_refused_in_training_and_dropped_with_a_warning_in_evaluation(
    chat_llama, tmp_path, caplog,
):
    """Mistral Instruct's template refuses system turns: training would change the data without a
    word, so it refuses the row; evaluation leaves the turn out and says so, as lm-eval does."""
    task = GenerationTask(data_files={split: str(write_jsonl(tmp_path / f"{split}.jsonl", [{"messages": TWO_TURNS}]))
                                      for split in ("train", "validation")}, until=[], max_new_tokens=2)
    step = FinetuneStep(model=chat_llama, tasks=[task], apply_chat_template="mistral", batch_size=1)
    refused = r"Instance train/0: The chat template .* refuses the conversation \(system, user, assistant, user\)"
    with pytest.raises(ConfigurationError, match=refused):
        step.result(LocalWorkspace(tmp_path / "ws"))
    with caplog.at_level("WARNING"):
        (record,) = PredictStep(model=chat_llama, task=task, apply_chat_template="mistral").run(
            model=chat_llama, task=task, apply_chat_template="mistral")
    assert "refuses a system turn" in caplog.text and record["references"] == ["a clean towel"]


def test_a_system_instruction_beside_the_conversation_s_own_system_turn_is_reported(tmp_path, caplog):
    task = GenerationTask(data_files={"validation": str(write_jsonl(tmp_path / "v.jsonl", [{"messages": TWO_TURNS}]))})
    tokenizer = ModelSpec.parse(CHAT_MODEL).load_tokenizer()
    with caplog.at_level("WARNING"):
        (instance,) = task.instances("validation", chat=ChatFormat(chat_renderer(tokenizer, True), "Be kind."))
    assert "system_instruction is not used for instance validation/0" in caplog.text
    assert instance.messages[0] == ("system", "Be brief.") and "Be kind." not in instance.prompt


def test_chat_rows_that_cannot_be_prompted_are_refused_when_the_graph_is_built(chat_task, tmp_path):
    """Conversations without a template, or with demonstrations, are refused before any step runs:
    the split's first row says so."""
    with pytest.raises(ConfigurationError, match="split 'validation' holds conversations .* --apply_chat_template"):
        PredictStep(model=CHAT_MODEL, task=chat_task, apply_chat_template=False)
    with pytest.raises(ConfigurationError, match="split 'train' holds conversations"):
        finetune(chat_task, apply_chat_template=False)
    shots = GenerationTask(data_files={split: str(CHAT / f"{split}.jsonl") for split in ("train", "validation")},
                           num_shots=1)
    with pytest.raises(ConfigurationError, match="carry their own turns: num_shots must be 0, not 1"):
        PredictStep(model=CHAT_MODEL, task=shots, apply_chat_template=True)
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"prompt": "Q: 1 + 1?\nA:", "answers": ["2"]}])
    PredictStep(model=CHAT_MODEL, task=GenerationTask(data_files={"validation": str(plain)}))  # prompts as they are


def test_conversations_need_a_template(chat_task):
    with pytest.raises(ConfigurationError, match="holds conversations .* set apply_chat_template"):
        chat_task.instances("validation", limit=2)


def test_fine_tuning_learns_each_assistant_turn_and_nothing_else(tmp_path):
    """One sequence per conversation, as the template writes it (Zephyr's writes no BOS, so none),
    its assistant turns learnt from where the generation prompt ends, end of turn included."""
    task = GenerationTask(data_files={"train": str(write_jsonl(tmp_path / "t.jsonl", [{"messages": TWO_TURNS}]))})
    spec = ModelSpec.parse(CHAT_MODEL, add_bos_token=False, chat_template=True)
    conventions = spec.conventions()
    render = chat_renderer(conventions.tokenizer, True, strict=True)
    (instance,) = task.instances("train", chat=ChatFormat(render))
    (example,) = answer_examples(conventions, [[instance]], max_length=128, desc="t", chat_example=lambda i, task: answer_row(
        *row_tokens(i, conventions, render, True, LearntTokens()), 128, keep_start=True, instance=i, task=task))
    decode = conventions.tokenizer.decode
    ids, mask = list(example.prompt + example.answer), [False] * len(example.prompt) + list(example.answer_mask())
    assert decode(ids) == render([dict(role=r, content=c) for r, c in instance.messages], False, continue_final_message=False)
    assert ids[0] != conventions.tokenizer.bos_token_id
    learnt, run = [], []
    for token, bit in zip(ids, mask):
        if bit:
            run.append(token)
        elif run:
            learnt, run = learnt + [decode(run)], []
    learnt += [decode(run)] if run else []
    assert learnt == ["a sharp knife</s>\n", "a clean towel</s>\n"]
    assert example.learnt == sum(mask) and example.instance is instance


def finetune(task, device_count=1, **extra) -> FinetuneStep:
    settings = dict(model=CHAT_MODEL, tasks=[task], apply_chat_template=True, batch_size=8, micro_batch_size=2,
                    train_epochs=1, train_limit=16, validation_limit=8, learning_rate=3e-3,
                    device_count=device_count, step_name="finetune")
    return FinetuneStep(**{**settings, **extra})


@pytest.fixture(scope="module")
def one_worker(chat_task, tmp_path_factory):
    step = finetune(chat_task)
    return step, step.result(LocalWorkspace(tmp_path_factory.mktemp("chat-one")))


@pytest.mark.ddp
@pytest.mark.parametrize("strategy, adapter, precision", [
    ("ddp", None, "32"), pytest.param("fsdp", None, "32", marks=pytest.mark.full),
    pytest.param("ddp", {"type": "lora", "r": 4}, "32", marks=pytest.mark.full),
    pytest.param("ddp", None, "bf16-mixed", marks=pytest.mark.full),
], ids=["ddp", "fsdp", "lora", "bf16-mixed"])
def test_two_workers_give_the_one_worker_model(chat_task, one_worker, tmp_path, strategy, adapter, precision):
    one, reference = one_worker
    if adapter is not None or precision != "32":
        one = finetune(chat_task, adapter=adapter, precision=precision)
        reference = one.result(LocalWorkspace(tmp_path / "one"))
    two = finetune(chat_task, 2, strategy=strategy, adapter=adapter, precision=precision)
    assert two.unique_id == one.unique_id
    result = two.result(LocalWorkspace(tmp_path / "two"))
    worst = largest_difference(reference.state_dict, result.state_dict)
    print(f"chat data, {strategy} {adapter} {precision}: 1 vs 2 workers, largest weight difference {worst:.1e}")
    assert worst < (BF16_WEIGHT_TOLERANCE if precision == "bf16-mixed" else WEIGHT_TOLERANCE)


@pytest.mark.full
@pytest.mark.ddp
@pytest.mark.parametrize("first, then", [(1, 2), (2, 1)], ids=["1->2", "2->1"])
def test_an_interrupted_run_resumes_on_another_device_count(chat_task, tmp_path, first, then):
    reference = finetune(chat_task, train_epochs=2).result(LocalWorkspace(tmp_path / "reference"))
    workspace = LocalWorkspace(tmp_path / "resumed")
    with pytest.raises(Exception, match="interrupted at step 3"):
        finetune(chat_task, first, train_epochs=2, callbacks=[Lazy(Interrupt, at=3)]).result(workspace)
    step = finetune(chat_task, then, train_epochs=2, callbacks=[Lazy(RecordStart)])
    resumed = step.result(workspace)
    assert (workspace.work_dir(step) / "started_at").read_text() == "2"  # from the checkpoint of step 2
    worst = largest_difference(reference.state_dict, resumed.state_dict)
    print(f"chat data, interrupted on {first}, resumed on {then}: largest weight difference {worst:.1e}")
    assert worst < WEIGHT_TOLERANCE


def test_the_template_is_in_the_key_and_a_model_without_one_is_refused(chat_task, mistral_llama):
    answers = GenerationTask(data_files={"train": str(TINY / "generation" / "train.jsonl")})  # prompt/answers rows
    assert finetune(answers, validation_split=None).unique_id != \
        finetune(answers, validation_split=None, apply_chat_template=False).unique_id
    assert finetune(chat_task).unique_id.startswith(f"FinetuneStep-{FinetuneStep.CHAT_VERSION}-")
    assert finetune(answers, validation_split=None, apply_chat_template=False).unique_id.startswith(
        f"FinetuneStep-{FinetuneStep.VERSION}-")
    assert finetune(chat_task, completion_only_loss=False).unique_id != finetune(chat_task).unique_id
    assert finetune(chat_task, assistant_only_loss=False).unique_id != finetune(chat_task).unique_id
    with pytest.raises(ConfigurationError, match="has no chat template"):
        finetune(chat_task, model=mistral_llama)


def test_a_chat_fine_tune_is_evaluated_under_its_template_unless_asked_otherwise(chat_task):
    model = finetune(chat_task)
    assert PredictStep(model=model, task=chat_task).kwargs["apply_chat_template"] is True
    same = PredictStep(model=model, task=chat_task, apply_chat_template="default")
    assert same.kwargs["apply_chat_template"] == "default"
    answers = GenerationTask(data_files={"validation": str(TINY / "generation" / "validation.jsonl")})
    for other in (False, "mistral"):
        with pytest.raises(ConfigurationError,
                           match="fine-tuned under its tokenizer's own chat template: its prompts would"):
            PredictStep(model=model, task=answers, apply_chat_template=other)
    allowed = PredictStep(model=model, task=answers, apply_chat_template=False, allow_other_template=True)
    assert allowed.unique_id == PredictStep(model=model, task=answers, apply_chat_template=False,
                                            allow_other_template=True, device_count=2).unique_id
    plain = PredictStep(model=CHAT_MODEL, task=answers)
    assert plain.kwargs["apply_chat_template"] is False  # a stock model: none, unless asked for
    assert plain.unique_id == PredictStep(model=CHAT_MODEL, task=answers, apply_chat_template=False).unique_id


def test_evaluation_generates_the_last_assistant_turn(one_worker, chat_task, tmp_path):
    _, model = one_worker
    step = PredictStep(model=CHAT_MODEL, task=chat_task, limit=4, apply_chat_template=True)
    records = step.run(model=model, task=chat_task, limit=4)  # under the template it was trained with
    rows = [json.loads(line) for line in (CHAT / "validation.jsonl").read_text().splitlines()[:4]]
    conventions = model.spec.conventions()
    assert (model.spec.chat_template, model.spec.add_bos_token) == (True, False)
    render = chat_renderer(conventions.tokenizer, True)
    for record, row in zip(records, rows):
        assert record["references"] == [row["messages"][-1]["content"]]
        prompt = render(row["messages"][:-1], True)
        assert record["num_prompt_tokens"] == len(conventions.prompt(prompt))
        assert record["generation"] and "</s>" not in record["generation"]


def test_diffs_of_chat_predictions_show_the_prompts_the_model_was_given(one_worker, chat_task, tmp_path):
    from catwalk_steps import ExportDiffStep

    step, _ = one_worker
    zero_shot = PredictStep(model=CHAT_MODEL, task=chat_task, limit=8, apply_chat_template=True)
    fine_tuned = PredictStep(model=step, task=chat_task, limit=8)  # under the template it was trained with
    diff = ExportDiffStep(baseline=zero_shot, candidate=fine_tuned, output_dir=str(tmp_path / "diffs"))
    assert (diff.kwargs["apply_chat_template"], diff.kwargs["model"]) == (True, CHAT_MODEL)
    settings = {key: diff.kwargs[key] for key in ("output_dir", "task", "split", "limit", "model", "apply_chat_template")}
    baseline = zero_shot.run(model=CHAT_MODEL, task=chat_task, limit=8, apply_chat_template=True)
    # Every answer flipped, so that every instance is listed with its prompt.
    flipped = [{**r, "scores": {**r["scores"], "exact_match": 1 - r["scores"]["exact_match"]}} for r in baseline]
    out = diff.run(baseline=baseline, candidate=flipped, **settings)
    changed = [json.loads(line) for line in (tmp_path / "diffs" / "diff.jsonl").read_text().splitlines()]
    assert out == str(tmp_path / "diffs") and len(changed) == 8
    render = chat_renderer(ModelSpec.parse(CHAT_MODEL).load_tokenizer(), True)
    rows = [json.loads(line) for line in (CHAT / "validation.jsonl").read_text().splitlines()[:8]]
    prompts = {f"validation/{n}": render(row["messages"][:-1], True) for n, row in enumerate(rows)}
    assert all(entry["prompt"] == prompts[entry["id"]] for entry in changed)
