"""The package installed from its wheel into a fresh venv, used from a folder outside the
checkout: the README's command-line example, a config that imports the Jsonnet helpers (run by
``python -m catwalk_steps.run``), and ``tango run`` of a ``catwalk::`` config without
``-i catwalk_steps`` and without a ``tango.yml`` (Tango finds the package as its ``catwalk``
integration). Slow (a venv of the whole stack): ``--full`` only."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import List, Tuple

import pytest

from .conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.full]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"}
TORCH = "torch==2.13.0"


def readme_command_line_example() -> str:
    """The README's ``python -m catwalk_steps.train`` example, as written there."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return next(block for block in blocks if block.startswith("python -m catwalk_steps.train"))


_started: List[Tuple[Path, "Future[Tuple[Path, dict]]"]] = []


def start_install(config: pytest.Config) -> None:
    """Builds the venv in a thread of its own (``conftest.py`` calls this once the session's
    tests are collected): about a minute of pip, mostly unpacking wheels, beside other tests.
    The folder is a temporary one of its own (pytest's base folders are rotated by other pytest
    runs of the same user), removed when the session ends, whether or not a test used it."""
    if _started:
        return
    folder = Path(tempfile.mkdtemp(prefix="catwalk-install-"))
    building = ThreadPoolExecutor(max_workers=1).submit(install, folder)
    _started.append((folder, building))

    def remove() -> None:
        wait([building])
        shutil.rmtree(folder, ignore_errors=True)

    config.add_cleanup(remove)


@pytest.fixture(scope="module")
def installed(pytestconfig):
    """(a folder outside the checkout holding a copy of data/tiny, the environment whose PATH
    starts with a fresh venv that has the wheel of this checkout). The wheel is built from a copy
    of the source, so no ``build/`` of an earlier build leaks into it."""
    start_install(pytestconfig)
    return _started[0][1].result(timeout=1200)


def install(root: Path):
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "*.egg-info", "workspace", "results", "__pycache__", ".pytest_cache"))
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(source)], root, os.environ, timeout=300)
    wheel = next((root / "dist").glob("catwalk_steps-*.whl"))
    run([sys.executable, "-m", "venv", str(root / "venv")], root, os.environ, timeout=120)
    bin = root / "venv" / "bin"
    run([str(bin / "pip"), "install", "-q", TORCH, str(wheel)], root, os.environ, timeout=900)
    here = root / "mine"
    shutil.copytree(REPO / "data" / "tiny", here / "data" / "tiny")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(OFFLINE, PATH=f"{bin}{os.pathsep}{env['PATH']}")
    return here, env


def run(command, here: Path, env, shell: bool = False, timeout: int = 600) -> str:
    done = subprocess.run(command, cwd=here, env=env, shell=shell, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_the_wheel_installs_cleanly_with_the_helpers_and_tangos_catwalk_integration(installed):
    here, env = installed
    run(["pip", "check"], here, env)
    found = run(["python", "-c", "import catwalk_steps, tango.integrations.catwalk as c; print(catwalk_steps.__file__)"],
                here, env)
    assert str(REPO) not in found and "site-packages" in found
    run(["python", "-c", "from catwalk_steps.command_line import CONFIGS; assert (CONFIGS / 'lib.libsonnet').is_file()"],
        here, env)


def test_the_readmes_command_line_example_runs_outside_the_checkout(installed):
    here, env = installed
    output = run(readme_command_line_example(), here, env, shell=True)
    assert re.search(r"piqa +│ fine-tuned", output) and re.search(r"piqa +│ zero-shot", output)
    assert "Δ acc [95% CI]" in output


def test_a_config_of_ones_own_uses_the_helpers(installed):
    here, env = installed
    (here / "mine.jsonnet").write_text(
        'local lib = import "lib.libsonnet";\n'
        'local piqa = { type: "piqa", data_files: { validation: "data/tiny/validation.jsonl" } };\n'
        '{ steps: lib.evaluate("tiny", "rc::data/tiny/model", piqa, { limit: 8 }) + lib.report({ tiny: "metrics_tiny" }) }\n'
    )
    output = run(["python", "-m", "catwalk_steps.run", "mine.jsonnet", "-w", "ws-mine"], here, env)
    assert "✓ 4 succeeded" in output


def test_tango_run_without_naming_the_package_finds_its_steps(installed):
    here, env = installed
    assert not (here / "tango.yml").exists()
    (here / "plain.jsonnet").write_text(
        '{ steps: { predict: { type: "catwalk::predict", model: "rc::data/tiny/model", limit: 8,\n'
        '  task: { type: "piqa", data_files: { validation: "data/tiny/validation.jsonl" } } } } }\n'
    )
    output = run(["tango", "run", "plain.jsonnet", "-w", "ws-plain"], here, env)
    assert "modeling_flax_auto" not in output and "✓ 1 succeeded" in output
