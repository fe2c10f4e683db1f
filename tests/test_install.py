"""The package built the standard way (``python -m build``: the sdist, then the wheel from the
sdist), installed into a fresh venv and used from a folder outside the checkout: the README's
command-line example, a config that imports the Jsonnet helpers (``python -m
catwalk_steps.run``), and ``tango run`` of a ``catwalk::`` config without ``-i catwalk_steps``
and without a ``tango.yml`` in every install layout (the ``.pth`` hook of
``_catwalk_steps_names.py``). Slow (a venv of the whole stack): ``--full`` only."""

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
from .documented import README_TRAIN, documented_argv

pytestmark = [pytest.mark.e2e, pytest.mark.full]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"}
TORCH = "torch==2.13.0"


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
        ".git", ".venv*", "build", "dist", "*.egg-info", "workspace", "results", "__pycache__", ".pytest_cache"))
    run([sys.executable, *documented_argv("python -m build")[1:]], source, os.environ, timeout=300)
    shutil.move(source / "dist", root / "dist")
    run([sys.executable, "-m", "venv", str(root / "venv")], root, os.environ, timeout=120)
    bin = root / "venv" / "bin"
    install_wheel = documented_argv("pip install torch==2.13.0 dist/catwalk_steps-0.1.0-py3-none-any.whl")
    run([str(bin / "pip"), *install_wheel[1:2], "-q", *install_wheel[2:]], root, os.environ, timeout=900)
    here = root / "mine"
    shutil.copytree(REPO / "data" / "tiny", here / "data" / "tiny")
    return here, environment(bin)


def environment(bin: Path) -> dict:
    """This process's environment, offline, with ``bin`` first on the PATH and no venv or
    PYTHONPATH of the test run's own."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONUSERBASE")}
    env.update(OFFLINE, PATH=f"{bin}{os.pathsep}{env['PATH']}")
    return env


def run(command, here: Path, env, timeout: int = 600) -> str:
    done = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_the_wheel_installs_cleanly_with_the_helpers_and_nothing_in_tangos_folder(installed):
    here, env = installed
    run(["pip", "check"], here, env)
    found = run(["python", "-c", "import catwalk_steps, tango; print(catwalk_steps.__file__); print(tango.__file__)"],
                here, env).split()
    assert str(REPO) not in found[0] and "site-packages" in found[0]
    tango_folder = Path(found[1]).parent
    assert not list(tango_folder.rglob("*catwalk*")), "a file of ours in another distribution's package"
    assert (Path(found[0]).parent.parent / "catwalk_steps_names.pth").is_file()
    run(["python", "-c", "from catwalk_steps.command_line import CONFIGS; assert (CONFIGS / 'lib.libsonnet').is_file()"],
        here, env)


def test_the_readmes_command_line_example_runs_outside_the_checkout(installed):
    here, env = installed
    output = run(documented_argv(README_TRAIN), here, env)
    assert re.search(r"piqa +│ fine-tuned", output) and re.search(r"piqa +│ zero-shot", output)
    assert "Δ acc [95% CI]" in output


def test_a_config_of_ones_own_uses_the_helpers(installed):
    here, env = installed
    (here / "mine.jsonnet").write_text(
        'local lib = import "lib.libsonnet";\n'
        'local piqa = { type: "piqa", data_files: { validation: "data/tiny/validation.jsonl" } };\n'
        '{ steps: lib.evaluate("tiny", "rc::data/tiny/model", piqa, { limit: 8 }) + lib.report({ tiny: "metrics_tiny" }) }\n'
    )
    output = run(documented_argv("python -m catwalk_steps.run my_config.jsonnet -w workspace",
                                 **{"my_config.jsonnet": "mine.jsonnet", "workspace": "ws-mine"}), here, env)
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


PLAIN_CONFIG = (
    '{ steps: { predict: { type: "catwalk::predict", model: "rc::data/tiny/model", limit: 2,\n'
    '  task: { type: "piqa", data_files: { validation: "data/tiny/validation.jsonl" } } } } }\n'
)


@pytest.mark.parametrize("layout", ["sdist", "editable", "user"])
def test_tango_run_finds_the_steps_in_every_install_layout(installed, layout, tmp_path):
    """catwalk-steps installed from the sdist, editable (the README's install), and with
    ``pip install --user``, each in a venv of its own whose stack (Tango included) comes from
    another folder: the first venv's site-packages, on the path through a ``.pth`` line, so its
    own ``.pth`` files are not run. ``tango run`` from a folder without a ``tango.yml``, then with
    one that names no package, finds ``catwalk::predict``."""
    here, stack_env = installed
    stack_bin = Path(stack_env["PATH"].split(os.pathsep)[0])
    stack_site = Path(run([str(stack_bin / "python"), "-c", "import tango, pathlib; print(pathlib.Path(tango.__file__).parent.parent)"],
                          here, stack_env).strip())
    stack = stack_without_us(stack_site, tmp_path / "stack")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", *(["--system-site-packages"] if layout == "user" else []), str(venv)], here, stack_env)
    own_site = next(venv.glob("lib/python3*/site-packages"))
    (own_site / "the_stack.pth").write_text(f"{stack}\n")
    env = environment(venv / "bin")
    dist = Path(installed_root()) / "dist"
    package = {"sdist": [next(dist.glob("*.tar.gz"))], "editable": ["-e", Path(installed_root()) / "source"],
               "user": ["--user", next(dist.glob("*.whl"))]}[layout]
    if layout == "user":
        env["PYTHONUSERBASE"] = str(tmp_path / "userbase")
    run(["python", "-m", "pip", "install", "-q", "--no-deps", *map(str, package)], here, env, timeout=300)
    found = run(["python", "-c", "import catwalk_steps, tango; print(catwalk_steps.__file__, tango.__file__)"], here, env)
    assert str(stack) in found.split()[1] and str(stack) not in found.split()[0]
    folder = tmp_path / "elsewhere"
    shutil.copytree(here / "data" / "tiny", folder / "data" / "tiny")
    (folder / "plain.jsonnet").write_text(PLAIN_CONFIG)
    output = run(["python", "-m", "tango", "run", "plain.jsonnet", "-w", "ws"], folder, env)
    assert "modeling_flax_auto" not in output and "✓ 1 succeeded" in output
    (folder / "tango.yml").write_text("workspace: {type: local, dir: ws-settings}\n")
    output = run(["python", "-m", "tango", "run", "plain.jsonnet"], folder, env)
    assert "✓ 1 succeeded" in output and (folder / "ws-settings" / "cache").is_dir()


def stack_without_us(site_packages: Path, folder: Path) -> Path:
    """A folder of links to everything in ``site_packages`` but catwalk-steps: the stack, Tango
    included, from another folder than the one the layout under test installs us in."""
    folder.mkdir()
    for entry in site_packages.iterdir():
        if "catwalk" not in entry.name and not entry.name.endswith(".pth"):
            (folder / entry.name).symlink_to(entry)
    return folder


def installed_root() -> Path:
    return _started[0][0]
