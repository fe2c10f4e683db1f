"""Few-shot prompts and the multiple-choice formulation: exact prompts, determinism, cache keys."""

import pytest
from tango.common.det_hash import det_hash
from tango.common.exceptions import ConfigurationError

from catwalk_steps.tasks import ArcEasyTask, MultipleChoiceTask, PiqaTask, TemplateTask, WinograndeTask

from .conftest import TINY, write_jsonl

TRAIN = [
    {"goal": "Goal 0", "sol1": "right 0.", "sol2": "wrong 0.", "label": 0},
    {"goal": "Goal 1", "sol1": "wrong 1.", "sol2": "right 1.", "label": 1},
    {"goal": "Goal 2", "sol1": "right 2.", "sol2": "wrong 2.", "label": 0},
    {"goal": "Goal 3", "sol1": "wrong 3.", "sol2": "right 3.", "label": 1},
]
VALIDATION = [{"goal": "Open a jar", "sol1": "Twist the lid.", "sol2": "Eat the lid.", "label": 0}]


@pytest.fixture
def files(tmp_path):
    return {"train": str(write_jsonl(tmp_path / "t.jsonl", TRAIN)),
            "validation": str(write_jsonl(tmp_path / "v.jsonl", VALIDATION))}


def test_zero_shot_cache_keys_are_those_from_before_few_shot_existed():
    """Computed at 896e840, before tasks had few-shot and formulation settings: a model
    fine-tuned then is still found in the cache."""
    tiny = {"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")}
    before = {
        "2G36sA54GbxdT2aAjqJHzp3jNEH37uckVXQKxv4LmvtrYyWSwD48DBbg2kXfzKcN5n2hH2CGkZ5awVYyhKBqzjGt":
            PiqaTask(data_files=tiny, num_shots=0, formulation="cloze"),
        "2XRW9qgG11xjf5dCJBqfmp8DDf4aQ3nBpkPCkV6X9kPstsvdzj2bHJ4QFY6M2g5A2km37dLMoVoVRo8cbNdyJLbq": PiqaTask(),
        "ovQS4MD1DU9KRYEypBh8hRQbmusM1jmKxbJTuXZJgUGibAnwzpXP5t6kfZ69wyFXWpW68KdsHL69FLLS9SN8JQj":
            ArcEasyTask(revision="abc"),
        "578LkSoFXQvb488DthJgSYNF9kFs876GAy9ZEGowVk5mMSUdMT8scTb5wjx8TubS3u8QwVDgPasa47ZvkVcxiYew": WinograndeTask(),
        "4v9ePTHFDyz6y14fEccTEZndCYY5rxaaZ4YLChdymtJCmU1gHpxoygGZGiU3efsDCFvRWzjeYTaHSbV6mUjYUvYB": TemplateTask(
            data_files={"train": str(TINY / "tools_train.jsonl")}, context="Question: {question}\nAnswer:",
            choices_field="options", label_field="answer", label_values=["A", "B", "C", "D"],
        ),
    }
    assert {key: key for key in before} == {det_hash(task): key for key, task in before.items()}


def test_k_shot_prompts_are_solved_training_instances_joined_by_blank_lines(files):
    task = PiqaTask(data_files=files, num_shots=2)
    (instance,) = task.instances("validation")
    assert instance.context == (
        "Question: Goal 3\nAnswer: right 3.\n\n"
        "Question: Goal 0\nAnswer: right 0.\n\n"
        "Question: Open a jar\nAnswer:"
    )
    assert instance.continuations == [" Twist the lid.", " Eat the lid."] and instance.label == 0
    assert [i.context for i in PiqaTask(data_files=files, num_shots=2, fewshot_seed=7).instances("validation")] == [
        "Question: Goal 1\nAnswer: right 1.\n\nQuestion: Goal 0\nAnswer: right 0.\n\nQuestion: Open a jar\nAnswer:"
    ]


def test_an_instance_never_demonstrates_itself_and_demonstrations_are_deterministic(files):
    task = PiqaTask(data_files=files, num_shots=3)
    instances = task.instances("train")
    for row, instance in zip(TRAIN, instances):
        demonstrations, question = instance.context.rsplit("\n\n", 1)
        assert question == f"Question: {row['goal']}\nAnswer:"
        assert row["goal"] not in demonstrations and demonstrations.count("Question:") == 3
    # Another task object, a prefix (limit), another order of calls: the same prompts.
    again = PiqaTask(data_files=files, num_shots=3)
    assert again.instances("train", limit=2) == instances[:2]
    assert again.instances("train") == instances
    # 4 training rows: 3 demonstrate a training instance, all 4 a validation one.
    assert len(PiqaTask(data_files=files, num_shots=4).instances("validation")) == 1
    with pytest.raises(ConfigurationError, match="4 demonstrations asked for, but split 'train' has only 3 to offer"):
        PiqaTask(data_files=files, num_shots=4).instances("train")


def test_winogrande_demonstrations_go_before_every_choice_context(tmp_path):
    rows = [{"sentence": f"Tom gave Sam {n} apples because _ was kind.", "option1": "Tom", "option2": "Sam",
             "answer": "1"} for n in (1, 2)]
    path = str(write_jsonl(tmp_path / "w.jsonl", rows))
    task = WinograndeTask(data_files={"train": path, "validation": path}, num_shots=1)
    first = task.instances("validation")[0]
    demo = "Tom gave Sam 2 apples because Tom was kind.\n\n"
    assert first.pairs() == [(demo + "Tom gave Sam 1 apples because Tom", " was kind."),
                             (demo + "Tom gave Sam 1 apples because Sam", " was kind.")]


def test_the_lettered_formulation_and_its_demonstrations(files):
    task = PiqaTask(data_files=files, num_shots=1, formulation="mc")
    (instance,) = task.instances("validation")
    assert instance.context == (
        "Question: Goal 3\nA. wrong 3.\nB. right 3.\nAnswer: B\n\n"
        "Question: Open a jar\nA. Twist the lid.\nB. Eat the lid.\nAnswer:"
    )
    assert instance.continuations == [" A", " B"] and instance.answer_lengths() == [1, 1]
    with pytest.raises(ConfigurationError, match="formulation must be one of cloze"):
        WinograndeTask(formulation="mc")
    with pytest.raises(ConfigurationError, match="formulation must be one of cloze, mc, got 'letters'"):
        PiqaTask(formulation="letters")


def test_prompt_settings_are_in_the_cache_key_only_when_set(files):
    keys = {
        det_hash(PiqaTask(data_files=files, **settings))
        for settings in ({}, {"num_shots": 1}, {"num_shots": 2}, {"num_shots": 2, "fewshot_seed": 1},
                         {"num_shots": 2, "fewshot_split": "validation"}, {"formulation": "mc"})
    }
    assert len(keys) == 6
    assert det_hash(PiqaTask(data_files=files, fewshot_seed=99)) == det_hash(PiqaTask(data_files=files))


def test_bad_few_shot_settings_fail_when_the_task_is_built(files):
    with pytest.raises(ConfigurationError, match="no split 'dev' to take 2 few-shot demonstrations"):
        PiqaTask(data_files=files, num_shots=2, fewshot_split="dev")
    with pytest.raises(ConfigurationError, match="num_shots must be at least 0"):
        PiqaTask(num_shots=-1)


def test_few_shot_settings_from_a_config(files):
    from tango.common import Params

    task = MultipleChoiceTask.from_params(Params({
        "type": "template", "data_files": files, "context": "{goal} ->", "choice_fields": ["sol1", "sol2"],
        "num_shots": 1, "fewshot_seed": 3,
    }))
    assert task.instances("validation")[0].context.endswith("\n\nOpen a jar ->")
    assert task.num_shots == 1 and task.fewshot_seed == 3
