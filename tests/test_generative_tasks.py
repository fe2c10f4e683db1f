"""Generative tasks: rows in the hub's fields become prompts and references, bad rows and
settings are refused naming what to fix, GSM8K is scored by lm-evaluation-harness's rules."""

from pathlib import Path

import pytest
import yaml
from tango.common.det_hash import det_hash
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph

from catwalk_steps.tasks import DataError, GenerationTask, Gsm8kTask, SquadTask, Task, TriviaQATask
from catwalk_steps.tasks.gsm8k import EXACT_MATCH, FILTERS

from .conftest import write_jsonl

GSM8K = [
    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "He has 3 + 4 = 7.\n#### 7"},
    {"question": "A box holds 1,200 pens; 200 are sold. How many are left?", "answer": "1200 - 200 = 1000\n#### 1,000"},
]


def test_generation_rows_become_instances(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [{"prompt": "2+2=", "answers": ["4", "four"]}])
    task = GenerationTask(data_files={"validation": str(path)}, until=["\n"], max_new_tokens=5)
    (instance,) = task.instances("validation")
    assert (instance.id, instance.prompt, instance.references) == ("validation/0", "2+2=", ["4", "four"])
    assert (instance.until, instance.max_new_tokens) == (("\n",), 5)
    assert task.scores([instance], ["Four."]) == [{"exact_match": 1.0, "f1": 1.0}]
    assert task.scores([instance], ["it is 4"])[0]["exact_match"] == 0.0


def test_a_generative_task_resolves_wherever_a_task_is_taken(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [{"prompt": "2+2=", "answers": ["4"]}])
    graph = StepGraph.from_params({"p": {
        "type": "catwalk::predict", "model": "rc::gpt2", "task": {"type": "generation", "data_files": {"validation": str(path)}}
    }})
    assert isinstance(graph["p"].kwargs["task"], GenerationTask)
    assert Task.by_name("gsm8k") is Gsm8kTask


def test_the_cache_key_holds_the_file_contents_and_the_settings(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [{"prompt": "2+2=", "answers": ["4"]}])
    key = det_hash(GenerationTask(data_files={"validation": str(path)}))
    assert det_hash(GenerationTask(data_files={"validation": str(path)}, max_new_tokens=9)) != key
    assert det_hash(GenerationTask(data_files={"validation": str(path)}, until=["."])) != key
    write_jsonl(path, [{"prompt": "2+2=", "answers": ["5"]}])
    assert det_hash(GenerationTask(data_files={"validation": str(path)})) != key


@pytest.mark.parametrize("row, message", [
    ({"answers": ["4"]}, "line 1: field 'prompt' is missing"),
    ({"prompt": "", "answers": ["4"]}, "line 1: field 'prompt' is empty: give it a text"),
    ({"prompt": "2+2="}, "line 1: field 'answers' must be a non-empty list of answer texts, got None"),
    ({"prompt": "2+2=", "answers": "4"}, "line 1: field 'answers' must be a non-empty list of answer texts, got '4'"),
    ({"prompt": "2+2=", "answers": []}, "line 1: field 'answers' must be a non-empty list"),
])
def test_a_bad_row_names_the_file_line_and_field(tmp_path, row, message):
    path = write_jsonl(tmp_path / "v.jsonl", [row])
    with pytest.raises(DataError, match=str(path)) as error:
        GenerationTask(data_files={"validation": str(path)}).instances("validation")
    assert message in str(error.value)


def test_an_answer_that_is_not_a_text_is_named(tmp_path):
    path = tmp_path / "v.jsonl"
    path.write_text('{"prompt": "1+1=", "answers": [2]}\n')
    with pytest.raises(DataError, match="line 1: field 'answers' must hold only texts, got 2"):
        GenerationTask(data_files={"validation": str(path)}).instances("validation")


@pytest.mark.parametrize("answer", ["", " ", "...", " ?! "])
def test_an_answer_scoring_cannot_tell_from_an_empty_one_is_refused(tmp_path, answer):
    # It was taken, and a punctuation-only generation scored exact_match 1.0 and f1 1.0 against it.
    path = write_jsonl(tmp_path / "v.jsonl", [{"prompt": "2+2=", "answers": ["4", answer]}])
    with pytest.raises(DataError) as error:
        GenerationTask(data_files={"validation": str(path)}).instances("validation")
    assert str(error.value) == (
        f"{path}: line 1: field 'answers' holds {answer!r}, which is empty once SQuAD's scoring drops punctuation: an "
        "empty or punctuation-only generation would match it; remove it"
    )


@pytest.mark.parametrize("settings, message", [
    ({"max_new_tokens": 0}, "max_new_tokens must be at least 1, got 0"),
    ({"until": ["\n", ""]}, "an empty stop string"),
    ({}, "give data_files"),
])
def test_bad_settings_fail_at_graph_build(tmp_path, settings, message):
    path = write_jsonl(tmp_path / "v.jsonl", [{"prompt": "1+1=", "answers": ["2"]}])
    data_files = {} if not settings else {"data_files": {"validation": str(path)}}
    with pytest.raises(ConfigurationError, match=message):
        StepGraph.from_params({"p": {"type": "catwalk::predict", "model": "rc::gpt2",
                                     "task": {"type": "generation", **data_files, **settings}}})


def test_until_given_as_a_string_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [{"prompt": "1+1=", "answers": ["2"]}])
    task = {"type": "generation", "data_files": {"validation": str(path)}, "until": "Q:"}
    message = """GenerationTask: until must be a list, got the string 'Q:': write ["Q:"] for one item"""
    with pytest.raises(ConfigurationError) as error:  # it was the stops "Q" and ":"
        StepGraph.from_params({"p": {"type": "catwalk::predict", "model": "rc::gpt2", "task": task}})
    assert str(error.value) == message
    with pytest.raises(ConfigurationError, match="until must be a list, got the string 'Q:'"):
        GenerationTask(data_files={"validation": str(path)}, until="Q:")  # type: ignore[arg-type]


def test_sampling_settings_are_refused_as_greedy_only(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [{"prompt": "1+1=", "answers": ["2"]}])
    task = {"type": "generation", "data_files": {"validation": str(path)}, "do_sample": True, "temperature": 0.7}
    with pytest.raises(ConfigurationError) as error:  # it was "Extra parameters passed to GenerationTask"
        StepGraph.from_params({"p": {"type": "catwalk::predict", "model": "rc::gpt2", "task": task}})
    assert str(error.value) == (
        "GenerationTask: do_sample, temperature: generation is greedy only (the most likely token at each step, "
        "lm-evaluation-harness's default); remove the sampling settings"
    )


def test_gsm8k_prompts_demonstrations_and_filters_are_lm_evaluation_harness_s(tmp_path):
    import lm_eval

    harness = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
    assert FILTERS == {f["name"]: [(s["function"], {k: v for k, v in s.items() if k != "function"}) for s in f["filter"]]
                       for f in harness["filter_list"]}
    assert EXACT_MATCH == {k: v for k, v in harness["metric_list"][0].items() if k not in ("metric", "aggregation",
                                                                                            "higher_is_better")}
    assert Gsm8kTask.UNTIL == tuple(harness["generation_kwargs"]["until"])
    assert Gsm8kTask.DEFAULT_SHOTS == harness["num_fewshot"]
    files = {"train": str(write_jsonl(tmp_path / "train.jsonl", GSM8K[1:])),
             "test": str(write_jsonl(tmp_path / "test.jsonl", GSM8K))}
    task = Gsm8kTask(data_files=files, num_shots=1)
    first = task.instances("test")[0]
    assert first.prompt == f"Question: {GSM8K[1]['question']}\nAnswer: {GSM8K[1]['answer']}\n\nQuestion: {GSM8K[0]['question']}\nAnswer:"
    second = task.instances("test")[1]
    scores = task.scores([first, second, second], [" 3 + 4 = 7.\n#### 7", " So 1000 pens, about $1,000.", "#### 1000"])
    assert scores == [
        {"exact_match/strict-match": 1.0, "exact_match/flexible-extract": 1.0},
        {"exact_match/strict-match": 0.0, "exact_match/flexible-extract": 1.0},  # no "####", last number $1,000
        {"exact_match/strict-match": 1.0, "exact_match/flexible-extract": 1.0},
    ]


def test_squad_and_triviaqa_read_the_hub_fields(tmp_path):
    squad = write_jsonl(tmp_path / "squad.jsonl", [{
        "id": "5733be", "title": "Notre_Dame", "context": "The college was founded in 1842.",
        "question": "When was it founded?", "answers": {"text": ["1842", "in 1842"], "answer_start": [27, 24]},
    }])
    (instance,) = SquadTask(data_files={"validation": str(squad)}).instances("validation")
    assert instance.prompt == ("Title: Notre_Dame\n\nBackground: The college was founded in 1842.\n\n"
                               "Question: When was it founded?\n\nAnswer:")
    assert instance.references == ["1842", "in 1842"] and instance.until == ("\n",)
    trivia = write_jsonl(tmp_path / "trivia.jsonl", [{
        "question": "Which planet is red", "question_id": "q1",
        "answer": {"aliases": ["Mars", "The Red Planet"], "value": "Mars", "normalized_aliases": ["mars"]},
    }])
    task = TriviaQATask(data_files={"validation": str(trivia)})
    (instance,) = task.instances("validation")
    assert instance.prompt == "Question: Which planet is red?\nAnswer:"
    assert [s["exact_match"] for s in task.scores([instance] * 3, [" red planet", "mars", "Venus"])] == [1.0, 1.0, 0.0]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": ["Mars"]}])
    with pytest.raises(DataError, match="line 1: field 'answer' must be an object with a 'aliases' field"):
        TriviaQATask(data_files={"validation": str(bad)}).instances("validation")
