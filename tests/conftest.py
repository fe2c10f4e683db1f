import os
from pathlib import Path

import pytest
from tango.common.logging import initialize_logging, teardown_logging
from tango.workspaces import LocalWorkspace

from catwalk_steps import PiqaTask

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "data" / "tiny"
TINY_MODEL = f"rc::{TINY / 'model'}"
NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        help="also run the tests marked `full` (the invariance, resume, 2-node and signal matrices)",
    )


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)  # stable: the others keep their order
    if config.getoption("--full"):
        return
    skip = pytest.mark.skip(reason="a full-matrix test: run with `python -m pytest --full`")
    for item in items:
        if item.get_closest_marker("full") is not None:  # not keywords: they hold parameter ids too
            item.add_marker(skip)


def pytest_collection_finish(session):
    """The slowest setup, a fresh venv with this checkout's wheel (``test_install.py``), starts
    as soon as the tests to run are known: pip unpacks wheels while the tests before it run
    (not for ``--collect-only``, nor in each worker of a distributed pytest)."""
    config = session.config
    if config.option.collectonly or hasattr(config, "workerinput"):
        return
    from .documented import COMMANDS_RUN, CollectedTest

    COMMANDS_RUN.collected = [
        CollectedTest(item.nodeid, item.path.stem, item.originalname, tuple(item.fixturenames))
        for item in session.items if isinstance(item, pytest.Function)
    ]
    COMMANDS_RUN.recording = True  # from here on, a documented command a test asks for is one it runs
    if any(item.module.__name__.endswith(".test_install") and item.get_closest_marker("skip") is None
           for item in session.items if getattr(item, "module", None) is not None):
        from .test_install import start_install

        start_install(config)


def pytest_runtest_logreport(report):
    from .documented import COMMANDS_RUN

    if report.skipped and isinstance(report.longrepr, tuple):  # (file, line, "Skipped: why")
        COMMANDS_RUN.skipped[report.nodeid] = report.longrepr[2].removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter):
    """Which documented commands this session ran, and which it skipped where
    (tests/test_docs.py's last check)."""
    from .documented import COMMANDS_RUN

    if COMMANDS_RUN.summary:
        terminalreporter.section("documented commands")
        for line in COMMANDS_RUN.summary:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def tracebacks_in_the_sessions_folder(tmp_path_factory):
    """One-line errors write their tracebacks (catwalk_steps/tango_fixes/one_line_errors.py) to
    the session's folder, in this process and the ``tango run``s it starts, not the temp folder."""
    from catwalk_steps.tango_fixes.one_line_errors import TRACEBACKS_VARIABLE

    os.environ[TRACEBACKS_VARIABLE] = str(tmp_path_factory.getbasetemp() / "tracebacks.txt")
    yield
    del os.environ[TRACEBACKS_VARIABLE]


@pytest.fixture(scope="session", autouse=True)
def tango_logging():
    # DDP workers send their logs to the main process over a socket that this sets up.
    initialize_logging()
    yield
    teardown_logging()


@pytest.fixture
def tiny_task() -> PiqaTask:
    return PiqaTask(data_files={"train": str(TINY / "train.jsonl"), "validation": str(TINY / "validation.jsonl")})


@pytest.fixture
def workspace(tmp_path) -> LocalWorkspace:
    return LocalWorkspace(tmp_path / "workspace")


def computed_in_this_process(config: Path, *steps: str, workspace: Path) -> list:
    """The results of ``steps`` of ``config`` (and of the steps they need), computed here as
    ``tango run config -w workspace`` computes them, under the same cache keys, but without its
    seconds of start-up: a worker forks from the preloaded server instead of importing anew."""
    from tango.step_graph import StepGraph

    graph, cached_in = StepGraph.from_file(config), LocalWorkspace(workspace)
    return [graph[step].result(cached_in) for step in steps]


def write_jsonl(path: Path, rows) -> Path:
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


#: What a worker imports before its first line of work: the training and prediction loops, the
#: demo's model code, and the adapters library.
WORKER_MODULES = ["catwalk_steps.training.loop", "catwalk_steps.prediction.workers",
                  "transformers.models.gpt2.modeling_gpt2", "peft"]


@pytest.fixture(scope="session", autouse=True)
def workers_forked_from_a_preloaded_server(tango_logging):
    """Workers launched in this process fork from one server that imported torch, transformers and
    our loops once, instead of each spawning an interpreter that imports them anew (about 5 s of
    CPU per worker, 2 workers per launch, dozens of launches). The server starts here, after Tango's
    logging set the environment its children inherit. `tango run` subprocesses keep the default."""
    import multiprocessing
    import multiprocessing.forkserver

    from catwalk_steps.distributed import launch

    multiprocessing.set_forkserver_preload(WORKER_MODULES)
    multiprocessing.forkserver.ensure_running()
    launch.START_METHOD = "forkserver"
    yield
    launch.START_METHOD = "spawn"


@pytest.fixture(scope="session")
def sequential_sweep(tmp_path_factory) -> Path:
    """The workspace of one `tango run` of the tiny sweep (run "sweep"; its files exported beside
    it, in ``results``), at one thread: the Slurm sweep's jobs run at one thread each, and torch sums
    in another order at another thread count."""
    from .tango_runs import documented_run, export_to

    workspace = tmp_path_factory.mktemp("sweep") / "workspace"
    documented_run("tango run configs/sweep_tiny.jsonnet -w workspace", workspace, "sweep",
                   *export_to(workspace.parent / "results"), env={"OMP_NUM_THREADS": "1"})
    return workspace


@pytest.fixture(scope="session")
def mistral_tokenizer_path(tmp_path_factory) -> Path:
    """Mistral-7B v0.1's BOS-adding tokenizer (built offline from the ``mistral-common`` wheel:
    tests/tiny_models.py)."""
    from .tiny_models import mistral_tokenizer

    return mistral_tokenizer(tmp_path_factory.mktemp("mistral-tokenizer"))


@pytest.fixture(scope="session")
def mistral_llama(tmp_path_factory, mistral_tokenizer_path) -> str:
    """``rc::`` spec of a tiny random Llama with Mistral-7B v0.1's tokenizer."""
    from .tiny_models import tiny_llama

    return f"rc::{tiny_llama(tmp_path_factory.mktemp('mistral-llama'), mistral_tokenizer_path)}"


@pytest.fixture(scope="session")
def chat_llama(tmp_path_factory, mistral_tokenizer_path) -> str:
    """The same tiny Llama (same weights) with chat templates: Zephyr's by default, Mistral
    Instruct's as ``mistral`` (tests/tiny_models.py)."""
    from .tiny_models import chat_tokenizer, tiny_llama

    tokenizer = chat_tokenizer(tmp_path_factory.mktemp("chat-tokenizer"), mistral_tokenizer_path)
    return f"rc::{tiny_llama(tmp_path_factory.mktemp('chat-llama'), tokenizer)}"
