"""Each task's conversion of hand-written rows: prompt text, continuations and gold index."""

import pytest
from tango.common.det_hash import det_hash
from tango.common.exceptions import ConfigurationError

from catwalk_steps.tasks import DataError, MultipleChoiceTask, TemplateTask

from .conftest import write_jsonl

ARC_ROW = {
    "question": "Which gas do plants take in?",
    "choices": {"text": ["oxygen", "carbon dioxide", "helium"], "label": ["A", "B", "C"]},
    "answerKey": "B",
}
CASES = {
    "arc_easy": (ARC_ROW, "Question: Which gas do plants take in?\nAnswer:", [" oxygen", " carbon dioxide", " helium"], 1),
    "arc_challenge": (
        {**ARC_ROW, "choices": {"text": ["a", "b"], "label": ["1", "2"]}, "answerKey": "2"},
        "Question: Which gas do plants take in?\nAnswer:", [" a", " b"], 1,
    ),
    "openbookqa": (
        {"question_stem": "The sun is", "choices": {"text": ["a star", "a planet"], "label": ["A", "B"]}, "answerKey": " A"},
        "The sun is", [" a star", " a planet"], 0,
    ),
    "hellaswag": (
        {
            "activity_label": "Making a cake", "ctx_a": "A man mixes flour.", "ctx_b": "he",
            "endings": ["bakes it [title] well.", "eats  the bowl.", "sings.", "leaves."], "label": "0",
        },
        "Making a cake: A man mixes flour. He", [" bakes it. well.", " eats the bowl.", " sings.", " leaves."], 0,
    ),
    "copa": (
        {"premise": "The man broke his toe.", "choice1": "He dropped a hammer.", "choice2": "He sang.",
         "question": "cause", "label": 0},
        "The man broke his toe because", [" he dropped a hammer.", " he sang."], 0,
    ),
    "boolq": (
        {"passage": "Water boils at 100 C.", "question": "does water boil at 100 c", "label": 1},
        "Water boils at 100 C.\nQuestion: does water boil at 100 c?\nAnswer:", [" no", " yes"], 1,
    ),
    "sciq": (
        {"support": "  Cells divide.", "question": "What divides?", "distractor1": "rocks",
         "distractor2": "water", "distractor3": "air", "correct_answer": "cells"},
        "Cells divide.\nQuestion: What divides?\nAnswer:", [" rocks", " water", " air", " cells"], 3,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_convert_like_lm_evaluation_harness(tmp_path, name):
    row, context, continuations, label = CASES[name]
    task = MultipleChoiceTask.by_name(name)(data_files={"validation": str(write_jsonl(tmp_path / "v.jsonl", [row]))})
    (instance,) = task.instances("validation")
    assert (instance.context, instance.continuations, instance.label) == (context, continuations, label)
    assert instance.pairs() == [(context, c) for c in continuations]


def test_sciq_accepts_an_empty_support():
    task = MultipleChoiceTask.by_name("sciq")()
    from catwalk_steps.tasks import Row

    instance = task.row_to_instance(Row({**CASES["sciq"][0], "support": ""}, "s", 1), "x")
    assert instance.context == "\nQuestion: What divides?\nAnswer:"


def test_winogrande_varies_the_context_and_shares_the_continuation(tmp_path):
    row = {"sentence": "The trophy did not fit in the case because the _ was too big.",
           "option1": "trophy", "option2": "case", "answer": "1"}
    task = MultipleChoiceTask.by_name("winogrande")(data_files={"validation": str(write_jsonl(tmp_path / "w.jsonl", [row]))})
    (instance,) = task.instances("validation")
    assert instance.label == 0
    assert instance.pairs() == [
        ("The trophy did not fit in the case because the trophy", " was too big."),
        ("The trophy did not fit in the case because the case", " was too big."),
    ]


@pytest.mark.parametrize(
    "name, row, message",
    [
        ("arc_easy", {**ARC_ROW, "answerKey": "D"}, "field 'answerKey' must be one of ['A', 'B', 'C'], got 'D'"),
        ("hellaswag", {**CASES["hellaswag"][0], "label": "7"}, "field 'label' must be one of"),
        ("copa", {**CASES["copa"][0], "question": "why"}, "field 'question' must be 'cause' or 'effect'"),
        ("winogrande", {"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"}, "exactly one '_'"),
        ("winogrande", {"sentence": "a _ b", "option1": "a", "option2": "b", "answer": "3"}, "field 'answer'"),
        ("boolq", {"passage": "p", "question": "q", "label": 2}, "field 'label' must be in [0, 1], got 2"),
    ],
)
def test_bad_rows_are_named(tmp_path, name, row, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [row])
    with pytest.raises(DataError) as error:
        MultipleChoiceTask.by_name(name)(data_files={"train": str(path)}).instances("train")
    assert f"{path}: line 1: " in str(error.value) and message in str(error.value)


def test_a_task_from_a_config_alone(tmp_path):
    rows = [{"q": "2+2?", "options": ["3", "4", "5"], "answer": "B"}]
    task = TemplateTask(
        data_files={"validation": str(write_jsonl(tmp_path / "m.jsonl", rows))},
        context="Q: {q}\nA:", choices_field="options", label_field="answer", label_values=["A", "B", "C"],
    )
    (instance,) = task.instances("validation")
    assert (instance.context, instance.continuations, instance.label) == ("Q: 2+2?\nA:", [" 3", " 4", " 5"], 1)
    other_prompt = TemplateTask(
        data_files={"validation": str(tmp_path / "m.jsonl")},
        context="{q}", choices_field="options", label_field="answer", label_values=["A", "B", "C"],
    )
    assert det_hash(other_prompt) != det_hash(task)
    with pytest.raises(ConfigurationError, match="exactly one of choice_fields and choices_field"):
        TemplateTask(data_files={"validation": str(tmp_path / "m.jsonl")}, context="{q}")


@pytest.mark.parametrize("settings, message", [
    ({"choice_fields": ["a"]}, "choice_fields must name at least 2 fields (the choices), got ['a']"),
    ({"choices_field": "options", "label_values": []},
     "label_values is empty: list the label of each choice, or leave it out for an integer label"),
])
def test_template_settings_that_make_no_question_are_refused(tmp_path, settings, message):
    path = write_jsonl(tmp_path / "m.jsonl", [{"q": "2+2?", "a": "4", "options": ["3", "4"], "label": 1}])
    with pytest.raises(ConfigurationError) as error:
        TemplateTask(data_files={"validation": str(path)}, context="{q}", **settings)
    assert str(error.value) == message


def test_template_task_builds_from_params(tmp_path):
    from tango.common import Params

    path = write_jsonl(tmp_path / "m.jsonl", [{"goal": "g", "a": "x", "b": "y", "label": 1}])
    task = MultipleChoiceTask.from_params(Params({
        "type": "template", "data_files": {"train": str(path)}, "context": "{goal}", "choice_fields": ["a", "b"],
    }))
    assert task.instances("train")[0].continuations == [" x", " y"]


def mmlu_row(subject: str, n: int) -> dict:
    return {"question": f"Q{n}?", "subject": subject, "choices": ["w", "x", "y", "z"], "answer": n % 4}


def test_mmlu_subjects_prompts_and_groups(tmp_path):
    rows = [mmlu_row("anatomy", 0), mmlu_row("virology", 1), mmlu_row("anatomy", 2)]
    dev = [mmlu_row("virology", 5), mmlu_row("anatomy", 6), mmlu_row("anatomy", 7)]
    data = {"test": str(write_jsonl(tmp_path / "t.jsonl", rows)), "dev": str(write_jsonl(tmp_path / "d.jsonl", dev))}
    mmlu = MultipleChoiceTask.by_name("mmlu")
    first, second = mmlu(data_files=data, subjects=["anatomy"], num_shots=1).instances("test")
    assert (first.id, second.id, first.group) == ("test/0", "test/2", "anatomy")
    demonstration = "Q6?\nA. w\nB. x\nC. y\nD. z\nAnswer: C\n\n"  # the subject's first dev row
    assert first.pairs()[1] == (
        "The following are multiple choice questions (with answers) about anatomy.\n\n"
        + demonstration + "Q0?\nA. w\nB. x\nC. y\nD. z\nAnswer:", " B")
    cloze = mmlu(data_files=data, formulation="cloze").instances("test")[1]
    description = "The following are questions (with answers) about virology.\n\n"
    assert cloze.pairs()[0] == (description + "Question: Q1?\nAnswer:", " w")
    assert cloze.label == 1 and mmlu(data_files=data, formulation="cloze").unconditioned_context == "Answer:"
    assert mmlu(data_files=data).unconditioned_context is None  # no baseline for letters
    assert det_hash(mmlu(data_files=data, subjects=["virology", "anatomy"])) == det_hash(
        mmlu(data_files=data, subjects=["anatomy", "virology"]))
    with pytest.raises(ConfigurationError, match="Unknown MMLU subjects: anatomyy"):
        mmlu(subjects=["anatomyy"])
    bad = write_jsonl(tmp_path / "bad.jsonl", [mmlu_row("cooking", 0)])
    with pytest.raises(DataError, match="line 1: field 'subject' is not an MMLU subject"):
        mmlu(data_files={"test": str(bad)}).instances("test")


def test_social_iqa_and_commonsense_qa_in_both_formulations(tmp_path):
    siqa_row = {"context": "Alex gave a gift.", "question": "How does Alex feel?", "answerA": "sad",
                "answerB": "happy", "answerC": "angry", "label": "2"}
    path = str(write_jsonl(tmp_path / "s.jsonl", [siqa_row]))
    siqa = MultipleChoiceTask.by_name("social_iqa")
    (cloze,) = siqa(data_files={"validation": path}).instances("validation")
    assert (cloze.context, cloze.continuations, cloze.label) == (
        "Q: Alex gave a gift. How does Alex feel?\nA:", [" sad", " happy", " angry"], 1)
    (mc,) = siqa(data_files={"validation": path}, formulation="mc").instances("validation")
    assert mc.context == "Question: Alex gave a gift. How does Alex feel?\nA. sad\nB. happy\nC. angry\nAnswer:"
    csqa_row = {**ARC_ROW, "question": " Which gas do plants take in? "}
    path = str(write_jsonl(tmp_path / "c.jsonl", [csqa_row]))
    (csqa,) = MultipleChoiceTask.by_name("commonsense_qa")(data_files={"validation": path}).instances("validation")
    assert (csqa.context, csqa.continuations, csqa.label) == (CASES["arc_easy"][1], CASES["arc_easy"][2], 1)


def test_a_split_without_instances_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    from tango.workspaces import LocalWorkspace

    from catwalk_steps import PredictStep
    from catwalk_steps.tasks import MmluTask

    from .conftest import TINY_MODEL

    path = write_jsonl(tmp_path / "mmlu.jsonl", [mmlu_row("anatomy", 0)])
    task = MmluTask(data_files={"validation": str(path)}, subjects=["astronomy"])
    monkeypatch.setattr("catwalk_steps.models.loading.ModelSpec.load_tokenizer", None)  # nothing may load
    with pytest.raises(ConfigurationError) as error:  # it failed later: "No predictions to compute metrics on"
        PredictStep(model=TINY_MODEL, task=task, step_name="p").result(LocalWorkspace(tmp_path / "ws"))
    assert str(error.value) == "MmluTask: split 'validation' has no instances to predict"
