"""The README and the docs site: the README stays short, the site builds with warnings as errors,
every command the pages show is run by a test (as written there, through ``documented``), every
config fragment they show names real settings, and the README names every Tango fix."""

import inspect
import json
import re
import subprocess
import sys

import pytest
import rjsonnet
from tango import Step
from tango.step_graph import StepGraph

from catwalk_steps.tasks import Task

from .conftest import REPO
from .documented import (
    COMMANDS_RUN, PAGES, README_TRAIN, CollectedTest, CommandsRun, code_blocks, documented_argv, missing_rows,
    shell_commands, table_rows,
)
from .documented_coverage import ci_commands, commands_of_functions, judge

README_LINES = 250
# Measurement scripts (minutes each, on the reference's side too): their figures are what they
# print, with the machine and date, in docs/benchmarks.md; a test does not rerun them.
MEASUREMENTS = REPO / "docs" / "benchmarks.md"
SPHINX = "sphinx-build -W -b html docs docs/_build/html"


def test_the_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= README_LINES


@pytest.mark.last  # it checks what the session's other tests ran
def test_every_command_the_pages_show_is_run_by_a_test_of_this_session():
    """Each command a page shows is run by a test this session ran (or by .ci/run), or its
    tests were all skipped here, which the session's summary says, with why. Where this session
    did not collect the tests of some command (a file or a marker chosen), the check says which
    and skips: it passes only when it judged every command."""
    shown = [command for command, page in shell_commands().items() if page != MEASUREMENTS]
    verdict = judge(shown, COMMANDS_RUN, commands_of_functions(), ci_commands())
    COMMANDS_RUN.summary = verdict.summary()
    assert not verdict.missing, f"commands the docs show that no test of this session ran: {verdict.missing}"
    if verdict.not_collected:
        pytest.skip(f"this session did not collect the tests of {len(verdict.not_collected)} shown commands: "
                    f"{sorted(verdict.not_collected)}")
    assert verdict.run, "no test of this session ran a documented command: the record is broken"


def verdict_of(ran=(), skipped=(), ci=(), functions=None):
    """The verdict on one shown command, "cmd", run by ``test_a`` (its fixture ``fx`` runs it,
    through a helper) when ``functions`` says nothing else."""
    collected = [CollectedTest("tests/test_m.py::test_a", "test_m", "test_a", ("fx",)),
                 CollectedTest("tests/test_m.py::test_b", "test_m", "test_b", ())]
    run = CommandsRun(by_command={"cmd": set(ran)} if ran else {}, collected=collected, skipped=dict(skipped))
    return judge(["cmd"], run, functions or {("conftest", "fx"): {"cmd"}}, set(ci))


def test_a_command_counts_as_run_only_when_a_test_ran_it():
    assert verdict_of(ran=["tests/test_m.py::test_a"]).run == {"cmd": {"tests/test_m.py::test_a"}}
    assert verdict_of(ci=["cmd"]).by_ci == ["cmd"]
    # Named by a test that ran, but not run: not counted, whatever its source says.
    assert verdict_of().missing == {"cmd": "its tests ran (tests/test_m.py::test_a) but none ran it"}
    # Named by no test at all.
    assert verdict_of(functions={("test_m", "test_b"): {"other"}}).missing == {"cmd": "no test runs it"}
    # Its only test skipped in this run: said, with why, and not counted as run.
    skipped = verdict_of(skipped={"tests/test_m.py::test_a": "no Slurm cluster here: not root"})
    assert not skipped.run and not skipped.missing
    assert skipped.summary()[1] == "skipped here: cmd (1 test(s), e.g. tests/test_m.py::test_a: no Slurm cluster here: not root)"
    # Its test not collected in this session: not judged.
    assert verdict_of(functions={("test_x", "test_c"): {"cmd"}}).not_collected == {"cmd": ["test_x::test_c"]}


def test_the_tests_commands_are_found_through_their_fixtures_and_helpers():
    functions = commands_of_functions()
    assert "tango run configs/sweep_tiny.jsonnet -w workspace" in functions[("conftest", "sequential_sweep")]
    assert "python -m build" in functions[("test_install", "installed")]  # installed -> start_install -> install
    assert README_TRAIN in functions[("test_install", "test_the_readmes_command_line_example_runs_outside_the_checkout")]
    assert not any(README_TRAIN in run for (module, _), run in functions.items() if module == "test_end_to_end")


def test_a_command_no_page_shows_is_refused():
    with pytest.raises(AssertionError, match="no page shows"):
        documented_argv("tango run configs/nowhere.jsonnet -w workspace")


@pytest.mark.full
def test_the_docs_build_without_warnings(tmp_path):
    """The documented build (warnings as errors), into a folder of the test's own."""
    argv = documented_argv(SPHINX, **{"docs/_build/html": str(tmp_path / "html")})
    done = subprocess.run([sys.executable, "-m", "sphinx", *argv[1:], "-E", "--keep-going"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert (tmp_path / "html" / "api.html").is_file()
    api = (tmp_path / "html" / "api.html").read_text()
    assert "FinetuneStep" in api and "catwalk_steps.steps.predict.PredictStep" in api


PRELUDE = 'local lib = import "lib.libsonnet";\nlocal tiny = import "tiny.libsonnet";\nlocal task = { type: "piqa" };\n'


def evaluated(fragment: str) -> dict:
    """A config block as shown: a whole object, or its fields (``name: {...},`` lines), evaluated
    with ``lib``, ``tiny`` and a ``task`` bound, as the configs here bind them."""
    body = fragment.strip()
    if not body.startswith(("{", "local")):
        body = "{\n" + body + "\n}"
    return json.loads(rjsonnet.evaluate_snippet("<docs>", PRELUDE + body, jpathdir=[str(REPO / "configs")]))


def parameters(registered: type, method) -> set:
    signature = inspect.signature(method)
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()) and registered is not Step:
        return set()  # takes anything: nothing to check
    return set(signature.parameters) - {"self"}


STEP_SETTINGS = parameters(Step, Step.__init__) - {"kwargs"}


def unknown_settings(value, where: str):
    """(where, type, setting) for every setting of a registered catwalk step or task in ``value``
    that its ``run()`` or constructor does not take."""
    if isinstance(value, list):
        for n, item in enumerate(value):
            yield from unknown_settings(item, f"{where}[{n}]")
    if not isinstance(value, dict):
        return
    kind = value.get("type")
    for base, method, extra in ((Step, "run", STEP_SETTINGS), (Task, "__init__", set())):
        if isinstance(kind, str) and kind in base.list_available():
            registered = base.by_name(kind)
            known = parameters(registered, getattr(registered, method)) | extra
            if known:
                yield from ((where, kind, key) for key in value if key != "type" and key not in known)
    for key, item in value.items():
        yield from unknown_settings(item, f"{where}.{key}")


def test_every_config_the_pages_show_names_real_steps_tasks_and_settings(monkeypatch):
    monkeypatch.chdir(REPO)  # the configs' data files are relative to the checkout
    blocks = code_blocks("jsonnet")
    assert len(blocks) >= 10
    for page, block in blocks:
        config = evaluated(block)
        types = re.findall(r'type: "([^"]+)"', block)
        for kind in types:
            assert kind.split("::")[0] in ("catwalk", "torch", "ref") or kind in Task.list_available(), \
                f"{page.name}: unknown type {kind!r}"
        assert not list(unknown_settings(config, page.name)), f"{page.name}: {block}"
        if "steps" in config and block.startswith("local"):  # a whole config: its graph builds, values checked too
            StepGraph.from_params(config["steps"])


def test_a_setting_no_step_takes_is_found():
    config = evaluated('finetune: { type: "catwalk::finetune", model: "rc::gpt2", tasks: [task], batch_sise: 32 },')
    assert list(unknown_settings(config, "x")) == [("x.finetune", "catwalk::finetune", "batch_sise")]


def test_the_readmes_demo_config_is_the_demo():
    demo = (REPO / "configs" / "piqa_tiny.jsonnet").read_text()
    without_comments = "\n".join(line for line in demo.splitlines() if not line.startswith("//")) + "\n"
    assert without_comments in [block for _, block in code_blocks("jsonnet", [REPO / "README.md"])]


def test_the_readme_names_every_tango_fix():
    fixes = {path.stem for path in (REPO / "catwalk_steps" / "tango_fixes").glob("*.py")} - {"__init__"}
    readme = (REPO / "README.md").read_text()
    assert fixes and not {fix for fix in fixes if f"- `{fix}`:" not in readme}


def test_every_page_is_in_the_sites_table_of_contents():
    index = (REPO / "docs" / "index.md").read_text()
    pages = {page.stem for page in PAGES if page.parent.name == "docs"} - {"index"}
    assert not {page for page in pages if f"\n{page}\n" not in index}


def test_a_shown_table_matches_its_run_to_the_last_digit_shown():
    printed = " │ run │ 0.9453 ± 0.0202 │ 128 │\n"
    assert not missing_rows(" │ run │ 0.9454 ± 0.0201 │ 128 │", printed)
    assert missing_rows(" │ run │ 0.9455 ± 0.0202 │ 128 │", printed)
    assert missing_rows(" │ run │ 0.9453 ± 0.0202 │ 127 │", printed)
    parts = " │ a │ 1 │\n │ b │ 2 │\n┃ a ┃ x ┃\n │ a │ 3 │\n │ b │ 4 │\n"  # a table printed in two parts
    assert table_rows(parts) == [["a", "1", "3"], ["b", "2", "4"]]
