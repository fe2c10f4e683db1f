import json

import pytest
from tango.common.det_hash import det_hash
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph

from catwalk_steps import MultipleChoiceTask, PiqaTask, Task
from catwalk_steps.tasks import DataError

from .conftest import write_jsonl

ROWS = [
    {"goal": "Keep a door open", "sol1": "Use a doorstop.", "sol2": "Use a feather.", "label": 0},
    {"goal": "Dry wet shoes", "sol1": "Put them in the freezer.", "sol2": "Stuff them with newspaper.", "label": 1},
]


def test_piqa_rows_become_lm_eval_style_instances(tmp_path):
    task = PiqaTask(data_files={"validation": str(write_jsonl(tmp_path / "v.jsonl", ROWS))})
    first, second = task.instances("validation")
    assert first.context == "Question: Keep a door open\nAnswer:"
    assert first.continuations == [" Use a doorstop.", " Use a feather."]
    assert (first.label, second.label) == (0, 1)
    assert second.id == "validation/1"
    assert len(task.instances("validation", limit=1)) == 1


def test_piqa_is_registered_by_name():
    assert isinstance(MultipleChoiceTask.by_name("piqa")(), PiqaTask)
    assert PiqaTask().hub_id == "baber/piqa"


def test_every_multiple_choice_task_is_a_task_by_the_same_name():
    names = MultipleChoiceTask.list_available()
    assert set(names) <= set(Task.list_available())
    assert all(Task.resolve_class_name(n) == MultipleChoiceTask.resolve_class_name(n) for n in names)
    graph = StepGraph.from_params({"p": {"type": "catwalk::predict", "model": "rc::gpt2", "task": {"type": "piqa"}}})
    assert isinstance(graph["p"].kwargs["task"], PiqaTask)


@pytest.mark.parametrize(
    "bad_row, message",
    [
        ({"goal": "g", "sol1": "a", "label": 0}, "line 2: field 'sol2' is missing"),
        ({"goal": "", "sol1": "a", "sol2": "b", "label": 0}, "line 2: field 'goal' is empty"),
        ({"goal": "g", "sol1": "a", "sol2": "b", "label": 2}, "line 2: field 'label' must be in [0, 1], got 2"),
        ({"goal": "g", "sol1": "a", "sol2": "b", "label": -1}, "line 2: field 'label' must be in [0, 1], got -1"),
    ],
)
def test_bad_rows_name_file_row_and_field(tmp_path, bad_row, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], bad_row])
    with pytest.raises(DataError) as error:
        PiqaTask(data_files={"train": str(path)}).instances("train")
    assert str(path) in str(error.value)
    assert message in str(error.value)


BAD = {**ROWS[1], "label": 5}


@pytest.mark.parametrize("name, text, line", [
    # Blank lines are skipped: the bad row is the third, on line 5 (it was "row 3").
    ("v.jsonl", "".join(json.dumps(row) + "\n\n" for row in (*ROWS, BAD)), 5),
    ("v.json", "[\n" + ",\n\n".join(json.dumps(row) for row in (*ROWS, BAD)) + "\n]\n", 6),
    # A quoted field holding a line break (lines 2-3) and a blank line: the bad row is on line 6.
    ("v.csv", 'goal,sol1,sol2,label\n"Keep a door\nopen",a,b,0\n\n' + "Dry wet shoes,c,d,1\nx,e,f,5\n", 6),
])
def test_a_bad_row_names_its_line_in_the_file(tmp_path, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError) as error:
        PiqaTask(data_files={"train": str(path)}).instances("train")
    assert str(error.value) == f"{path}: line {line}: field 'label' must be in [0, 1], got 5"


def test_missing_data_file_and_split_are_configuration_errors(tmp_path):
    with pytest.raises(ConfigurationError, match="not found"):
        PiqaTask(data_files={"train": str(tmp_path / "nope.jsonl")})
    task = PiqaTask(data_files={"train": str(write_jsonl(tmp_path / "t.jsonl", ROWS))})
    with pytest.raises(ConfigurationError, match="no data file for split 'validation'"):
        task.instances("validation")


def test_cache_key_follows_file_contents_not_paths(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", ROWS)
    b = write_jsonl(tmp_path / "b.jsonl", ROWS)
    edited = write_jsonl(tmp_path / "c.jsonl", ROWS[:1])
    key = det_hash(PiqaTask(data_files={"train": str(a)}))
    assert det_hash(PiqaTask(data_files={"train": str(b)})) == key
    assert det_hash(PiqaTask(data_files={"train": str(edited)})) != key
    assert det_hash(PiqaTask()) != det_hash(PiqaTask(revision="main"))


def test_hub_loading_asks_datasets_for_the_hub_id_split_and_revision(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, **kwargs):
        calls.append((path, name, kwargs))
        return datasets.Dataset.from_list(ROWS)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    instances = PiqaTask(revision="abc123").instances("validation")
    assert calls == [("baber/piqa", None, {"split": "validation", "revision": "abc123"})]
    assert [i.label for i in instances] == [0, 1]
    with pytest.raises(ConfigurationError, match="unknown split 'test'"):
        PiqaTask().instances("test")


GOOD = json.dumps(ROWS[0])


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("cut.jsonl", f"{GOOD}\n{GOOD[:25]}".encode(),
         "line 2: not valid JSON (Unterminated string starting at; column 10): it ends before its JSON value "
         "does, so it was probably cut off"),
        ("bad-line.jsonl", f"{GOOD}\n{{goal: 1}}\n{GOOD}\n".encode(),
         "line 2: not valid JSON (Expecting property name"),
        ("empty.jsonl", b"", "the file is empty"),
        ("blank.csv", b"\n \n", "the file is empty"),
        ("latin1.jsonl", f"{GOOD}\n".encode() + '{"goal": "Café"}\n'.encode("latin-1"),
         "line 2: byte 0xe9 at column 14 is not UTF-8: save the file as UTF-8"),
        ("latin1.csv", "goal,sol1,sol2,label\nCafé,a,b,0\n".encode("latin-1"),
         "line 2: byte 0xe9 at column 4 is not UTF-8"),
        ("array-line.jsonl", f"{GOOD}\n[1, 2]\n".encode(), "line 2: a JSON array where a row is expected"),
        ("string-line.jsonl", f'{GOOD}\n"text"\n'.encode(), "line 2: a JSON string where a row is expected"),
        ("not-objects.json", json.dumps([ROWS[0], 3]).encode(), "item 2 of the array is a JSON number"),
        ("cut.json", json.dumps(ROWS, indent=1).encode()[:-30],
         "line 11: not valid JSON (Unterminated string starting at; column 11): it ends before"),
        ("fields.csv", b"goal,sol1,sol2,label\ng,a,b,0\ng,a, b,c,1\n", "line 3: 5 fields where the header has 4"),
        ("quote.csv", b'goal,sol1,sol2,label\ng,"a,b,0\n', 'line 2: not valid CSV (unexpected end of data)'),
        ("damaged.parquet", b"PAR1 not parquet", "datasets cannot read it as parquet (ArrowInvalid"),
    ],
)
def test_bad_data_files_name_the_file_the_line_and_the_fix(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError) as error:
        PiqaTask(data_files={"validation": str(path)}).instances("validation")
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)


def test_a_file_datasets_cannot_read_is_named(tmp_path, monkeypatch):
    import datasets

    def unreadable(*args, **kwargs):  # what datasets raises varies by version; here its wrapper around pyarrow's
        from datasets.exceptions import DatasetGenerationError

        try:
            raise ValueError("JSON parse error: Column(/label) changed from number to object")
        except ValueError as e:
            raise DatasetGenerationError("An error occurred while generating the dataset") from e

    monkeypatch.setattr(datasets, "load_dataset", unreadable)
    path = write_jsonl(tmp_path / "v.jsonl", ROWS)
    with pytest.raises(DataError, match=r"v.jsonl: datasets cannot read it as json \(ValueError: JSON parse error: "
                                        r"Column\(/label\) changed from number to object\): give every row the same"):
        PiqaTask(data_files={"validation": str(path)}).instances("validation")


@pytest.mark.parametrize(
    "name, content",
    [
        ("blank-lines.jsonl", f"{GOOD}\n\n{GOOD}\r\n".encode()),
        ("array.json", json.dumps(ROWS, indent=1).encode()),
        ("lines.json", f"{GOOD}\n{GOOD}".encode()),  # the last line complete, without a newline
        ("quoted.csv", b'goal,sol1,sol2,label\r\n"Keep, a door open","a ""doorstop""",b,0\r\n\r\ng,a,b,1\n'),
    ],
)
def test_good_data_files_pass_the_checks(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    assert len(PiqaTask(data_files={"validation": str(path)}).instances("validation")) == 2
