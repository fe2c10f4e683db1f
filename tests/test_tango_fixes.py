import importlib.metadata
import json
import subprocess
import sys

import pytest
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph
from tango.step_info import EnvironmentMetadata

import catwalk_steps  # noqa: F401  (applies the patch)

from .conftest import TINY, TINY_MODEL
from .tango_runs import TANGO


def test_step_metadata_survives_a_repository_without_commit_or_origin(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    assert EnvironmentMetadata().git is None  # Tango 1.3.2 raises ValueError here
    (tmp_path / "f").write_text("x")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    assert EnvironmentMetadata().git is None  # a commit, but no origin
    subprocess.run(["git", "remote", "add", "origin", "https://example.invalid/r.git"], check=True)
    assert EnvironmentMetadata().git.remote == "https://example.invalid/r.git"


TYPOS = """
import importlib.util, json, sys
from tango.step_graph import StepGraph
import catwalk_steps

model, task = sys.argv[1], json.loads(sys.argv[2])
for step in [
    {"type": "catwalk::predictt", "model": model, "task": task},
    {"type": "catwalk::predict", "model": model, "task": {**task, "type": "piqaa"}},
    {"type": "catwalk::predict", "model": model, "task": task, "limitt": 3},
    {"type": "transformers::finetune"},
]:
    try:
        StepGraph.from_params({"p": step})
    except Exception as e:
        print(f"{type(e).__name__}: {e}".replace("\\n", " "))
print(importlib.util.find_spec("transformers.models.auto.modeling_flax_auto") is not None)
"""


def test_typos_get_tangos_own_message_under_the_installed_transformers(tmp_path):
    """Tango's search for an unknown name imports its transformers integration, which does not
    import under transformers 5; a typo then surfaced as that ImportError."""
    task = {"type": "piqa", "data_files": {"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")}}
    done = subprocess.run(
        [sys.executable, "-c", TYPOS, TINY_MODEL, json.dumps(task)], cwd=tmp_path, capture_output=True, text=True
    )
    *errors, flax_importable = done.stdout.splitlines()
    assert errors[0].startswith("ConfigurationError: 'catwalk::predictt' not in acceptable choices for type"), done
    assert errors[1].startswith("ConfigurationError: 'piqaa' not in acceptable choices for task.type"), done
    assert errors[2] == "ConfigurationError: Extra parameters passed to PredictStep: {'limitt': 3}", done
    if flax_importable == "False":  # transformers 5: asking for the integration itself shows why it fails
        assert errors[3].startswith("ImportError: cannot import name 'modeling_flax_auto'"), done
        assert "'transformers::" not in errors[0]  # nothing it registered before failing is offered
    else:
        assert errors[3].startswith("ConfigurationError"), done  # missing arguments


def test_packages_are_recorded_without_pkg_resources(monkeypatch):
    monkeypatch.setitem(sys.modules, "pkg_resources", None)  # importing it fails, as on setuptools 81+
    packages = EnvironmentMetadata().packages
    assert ("ai2-tango", "1.3.2") in packages  # keys as pkg_resources wrote them: normalised, lower case
    assert ("huggingface-hub", importlib.metadata.version("huggingface_hub")) in packages
    assert packages == sorted(packages) and len({name for name, _ in packages}) == len(packages)


def test_include_package_registers_everything_without_importing_the_heavy_modules():
    # What `tango run` does with tango.yml's include_package, in a fresh interpreter.
    script = """
import json, sys
from tango.common.util import import_extra_module
import_extra_module("catwalk_steps")
from tango import Step
from catwalk_steps.tasks import MultipleChoiceTask
heavy = ["transformers.modeling_utils", "peft", "datasets", "torchmetrics", "sklearn",
         "catwalk_steps.training.loop", "scipy.stats"]
print(json.dumps({"steps": sorted(n for n in Step.list_available() if n.startswith("catwalk::")),
                  "tasks": len(MultipleChoiceTask.list_available()),
                  "loaded": [m for m in heavy if m in sys.modules]}))
"""
    found = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout)
    assert found["loaded"] == []
    assert found["steps"] == ["catwalk::calculate_metrics", "catwalk::compare", "catwalk::export_diff",
                              "catwalk::export_model", "catwalk::export_predictions", "catwalk::finetune", "catwalk::olmes_table",
                              "catwalk::predict", "catwalk::print_metrics", "catwalk::tabulate_metrics"]
    assert found["tasks"] >= 14


@pytest.mark.parametrize("setting, value, message", [
    ("limit", "5", "PredictStep: limit must be an integer, got '5'"),
    ("limit", 2.5, "PredictStep: limit must be an integer, got 2.5"),
    ("unconditioned", "yes", "PredictStep: unconditioned must be true or false, got 'yes'"),
    ("split", ["validation"], "PredictStep: split must be a string, got ['validation']"),
    ("task", {"type": "piqa", "data_files": "v.jsonl"},
     "PiqaTask: data_files must be an object ({name: value, ...}), got 'v.jsonl'"),
])
def test_a_setting_of_the_wrong_type_is_refused_naming_it(setting, value, message):
    # Tango 1.3.2 passes a plain value of the wrong type on to the step unchecked.
    step = {"type": "catwalk::predict", "model": TINY_MODEL, "task": {"type": "piqa", "data_files": {
        "validation": str(TINY / "validation.jsonl")}}, setting: value}
    with pytest.raises(ConfigurationError) as error:
        StepGraph.from_params({"p": step})
    assert str(error.value) == message


def test_a_string_where_a_list_is_meant_is_refused_not_split_into_characters():
    with pytest.raises(ConfigurationError) as error:
        StepGraph.from_params({"f": {"type": "catwalk::finetune", "model": TINY_MODEL, "tasks": "piqa"}})
    assert str(error.value) == """FinetuneStep: tasks must be a list, got the string 'piqa': write ["piqa"] for one item"""


ONE_LINE_CASES = {
    # A bad setting, refused when the step graph is built.
    "setting": ('{"steps": {"p": {"type": "catwalk::predict", "model": "%(model)s", "task": %(task)s, '
                '"system_instruction": 5}}}', "ConfigurationError: PredictStep: system_instruction must be a string"),
    # A bad data row, refused when the step reads its split.
    "row": ('{"steps": {"p": {"type": "catwalk::predict", "model": "%(model)s", "task": %(task)s}}}',
            "DataError: %(rows)s: line 2: field 'answers' must be a non-empty list of answer texts"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["row", pytest.param("setting", marks=pytest.mark.full)])
def test_a_bad_setting_and_a_bad_row_print_two_lines(tmp_path, case):
    """Through a real ``tango run``: the error's own line and where its traceback is, no
    traceback on the terminal."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "Q?", "answers": ["A"]}) + "\n" + json.dumps({"prompt": "Q?"}) + "\n")
    task = json.dumps({"type": "generation", "data_files": {"validation": str(rows)}})
    config, expected = ONE_LINE_CASES[case]
    (tmp_path / "bad.jsonnet").write_text(config % dict(model=TINY_MODEL, task=task))
    done = subprocess.run([TANGO, "run", "bad.jsonnet", "-w", "ws", "-i", "catwalk_steps"], cwd=tmp_path,
                          capture_output=True, text=True)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "Error:" in line or "the full traceback" in line]
    assert len(lines) == 2 and lines[0].split("ERROR", 1)[-1].strip().startswith(expected % dict(rows=rows)), output
    traceback_file = lines[1].split("the full traceback: ", 1)[1].split(")")[0]
    assert open(traceback_file).read().startswith("Traceback (most recent call last)")
