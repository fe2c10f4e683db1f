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
    assert f"{path}: row 1: " in str(error.value) and message in str(error.value)


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


def test_template_task_builds_from_params(tmp_path):
    from tango.common import Params

    path = write_jsonl(tmp_path / "m.jsonl", [{"goal": "g", "a": "x", "b": "y", "label": 1}])
    task = MultipleChoiceTask.from_params(Params({
        "type": "template", "data_files": {"train": str(path)}, "context": "{goal}", "choice_fields": ["a", "b"],
    }))
    assert task.instances("train")[0].continuations == [" x", " y"]
