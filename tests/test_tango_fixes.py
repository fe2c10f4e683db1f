import gc
import importlib.metadata
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from tango.common import logging as tango_logging
from tango.common.exceptions import ConfigurationError
from tango.step_graph import StepGraph
from tango.step_info import EnvironmentMetadata

import catwalk_steps  # noqa: F401  (applies the patch)
from catwalk_steps.tango_fixes import one_line_errors
from catwalk_steps.tango_fixes.one_line_errors import TRACEBACKS_VARIABLE

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
    {"type": "catwalk::finetune", "model": model, "tasks": [task], "packng": True, "batch_sise": 8},
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
    # A misspelt setting names the closest one the step takes (Tango 1.3.2: "Extra parameters" alone).
    assert errors[2] == "ConfigurationError: Extra parameters passed to PredictStep: {'limitt': 3} (did you mean 'limit'?)", done
    assert errors[3] == ("ConfigurationError: Extra parameters passed to FinetuneStep: {'packng': True, 'batch_sise': 8} "
                         "(did you mean 'packing' for 'packng', 'batch_size' for 'batch_sise'?)"), done
    if flax_importable == "False":  # transformers 5: asking for the integration itself shows why it fails
        assert errors[4].startswith("ImportError: cannot import name 'modeling_flax_auto'"), done
        assert "'transformers::" not in errors[0]  # nothing it registered before failing is offered
    else:
        assert errors[4].startswith("ConfigurationError"), done  # missing arguments


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
                              "catwalk::predict", "catwalk::print_metrics", "catwalk::reference_log_probs",
                              "catwalk::tabulate_metrics"]
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
    # A ref to a step the config lacks, found before plain `tango run` (no -i) had imported catwalk_steps.
    "ref": ('{"steps": {"p": {"type": "catwalk::predict", "model": "%(model)s", "task": %(task)s}, '
            '"m": {"type": "catwalk::calculate_metrics", "predictions": {"type": "ref", "ref": "p_typo"}}}}',
            "ConfigurationError: Specified dependency 'p_typo' can't be found in the config."),
    # The package's Jsonnet helpers, which plain `tango run` cannot find.
    "helpers": ('local lib = import "lib.libsonnet"; {"steps": lib.evaluate("e", "%(model)s", %(task)s)}',
                "ConfigurationError: %(config)s imports lib.libsonnet, catwalk's Jsonnet helper, which plain tango run "
                "cannot find: run it with python -m catwalk_steps.run %(config)s (and tango run's options), which can"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["row", "helpers", pytest.param("setting", marks=pytest.mark.full),
                                  pytest.param("ref", marks=pytest.mark.full)])
def test_a_bad_setting_and_a_bad_row_print_two_lines(tmp_path, case):
    """Through a real ``tango run`` (without ``-i catwalk_steps`` where the error comes before Tango
    needs a catwalk name): the error's own line and where its traceback is, no traceback on the
    terminal (Tango 1.3.2 printed 33-36 lines for a bad ref and for the helpers)."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"prompt": "Q?", "answers": ["A"]}) + "\n" + json.dumps({"prompt": "Q?"}) + "\n")
    task = json.dumps({"type": "generation", "data_files": {"validation": str(rows)}})
    config, expected = ONE_LINE_CASES[case]
    (tmp_path / "bad.jsonnet").write_text(config % dict(model=TINY_MODEL, task=task))
    include = ["-i", "catwalk_steps"] if case in ("setting", "row") else []
    done = subprocess.run([TANGO, "run", "bad.jsonnet", "-w", "ws", *include], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "400"})
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "Error:" in line or "its full traceback" in line]
    assert len(lines) == 2 and lines[0].split("ERROR", 1)[-1].strip().startswith(
        expected % dict(rows=rows, config=tmp_path / "bad.jsonnet")), output
    traceback_file = lines[1].split("its full traceback: the last in ", 1)[1].split(")")[0]
    assert traceback_file == os.environ[TRACEBACKS_VARIABLE]  # the session's (tests/conftest.py), not the temp folder
    assert "Traceback (most recent call last)" in open(traceback_file).read()


class Held:
    """Something a failing frame holds (a model, an optimizer): weakly referable, unlike exceptions."""


def failing_with(held: Held) -> None:
    raise ConfigurationError("a setting that cannot be")


def test_logged_errors_keep_no_exception_alive_and_share_one_rotating_file(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(TRACEBACKS_VARIABLE, str(tmp_path / "tracebacks.txt"))
    monkeypatch.setattr(one_line_errors, "ROTATE_AT", 1)
    held = Held()
    alive = weakref.ref(held)
    try:
        failing_with(held)
    except ConfigurationError as e:
        tango_logging.log_exc_info(type(e), e, e.__traceback__)
        tango_logging.log_exc_info(type(e), e, e.__traceback__)  # the step's log, then the excepthook's: once
    del held
    gc.collect()
    assert alive() is None  # Tango 1.3.2's fix kept every logged exception, and its frames, for good
    assert [r.getMessage().splitlines()[0] for r in caplog.records] == ["ConfigurationError: a setting that cannot be"]
    try:
        failing_with(Held())
    except ConfigurationError as e:
        tango_logging.log_exc_info(type(e), e, e.__traceback__)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tracebacks.txt", "tracebacks.txt.1"]
    assert all("failing_with" in (tmp_path / name).read_text() for name in ("tracebacks.txt", "tracebacks.txt.1"))


def test_each_patched_tango_function_has_one_owner():
    """``Registrable.search_modules`` was wrapped twice (by the start-up hook, then by
    ``integration_search``); each name is now patched by one module, wrapping Tango's own."""
    from tango.common import registrable, util
    from tango.common.params import Params
    from tango.common.registrable import Registrable

    owners = {  # the files whose code each name runs first
        "_catwalk_steps_names.py": [Registrable.search_modules.__func__, Params.from_file.__func__],
        "integration_search.py": [registrable.import_module_and_submodules],
        "package_walk.py": [util.import_module_and_submodules],
        "setting_names.py": [Params.pop, Params.assert_empty],
    }
    tango = Path(util.__file__).parent.parent
    for owner, functions in owners.items():
        for function in functions:
            assert Path(function.__code__.co_filename).name == owner, function
            assert tango in Path(function.__wrapped__.__code__.co_filename).parents, function  # Tango's own, not a wrapper
