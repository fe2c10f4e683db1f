"""What the README and the docs pages show, read from their Markdown, so that a test runs a
command or a config as it is written there: change one and a test fails until the other follows
(``tests/test_docs.py`` checks that every command shown is run by a test of the session:
:data:`COMMANDS_RUN`)."""

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Set, Tuple

from .conftest import REPO

# The README's command-line example (run by test_install.py outside the checkout; its flags are the
# demo's, which test_end_to_end.py checks share the demo's cache keys).
README_TRAIN = (
    "python -m catwalk_steps.train --model rc::data/tiny/model --task piqa --data_files train=data/tiny/train.jsonl "
    "validation=data/tiny/validation.jsonl --batch_size 16 --micro_batch_size 8 --train_epochs 8 --learning_rate 1e-3 "
    "--unconditioned -w workspace"
)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def code_blocks(language: str, pages: List[Path] = PAGES) -> List[Tuple[Path, str]]:
    """(page, text) of every fenced block of ``language`` (``bash``, ``jsonnet``, ``""``)."""
    return [(page, text) for page in pages for lang, text in FENCE.findall(page.read_text()) if lang == language]


def command_of(line: str) -> str:
    """A shell line as a command: its comment cut, its whitespace runs one space."""
    return re.sub(r"\s+", " ", line.split(" #")[0]).strip()


def shell_commands(pages: List[Path] = PAGES) -> Dict[str, Path]:
    """Every command of every ``bash`` block (continuation lines joined, comments cut), with the
    page that shows it."""
    commands = {}
    for page, text in code_blocks("bash", pages):
        for line in text.replace("\\\n", " ").splitlines():
            command = command_of(line)
            if command and not command.startswith("#"):
                commands[command] = page
    return commands


@dataclass(frozen=True)
class CollectedTest:
    """What tests/documented_coverage.py needs of a collected test: where its function and
    fixtures are."""

    node_id: str
    module: str  # the test module's file stem
    function: str
    fixtures: Tuple[str, ...]


@dataclass
class CommandsRun:
    """The shown commands this pytest session's tests ran (through :func:`documented`), by the
    tests (node ids) that ran them; the session's tests, and those it skipped, with why (all
    filled in by conftest.py). Only what runs once the tests are collected counts: a command
    named by a module constant or a parametrisation is not run by being named."""

    recording: bool = False
    by_command: Dict[str, Set[str]] = field(default_factory=dict)
    collected: List[CollectedTest] = field(default_factory=list)
    skipped: Dict[str, str] = field(default_factory=dict)
    summary: List[str] = field(default_factory=list)  # the check's account, printed at the session's end

    def record(self, command: str) -> None:
        if self.recording:  # PYTEST_CURRENT_TEST: "<node id> (<phase>)"; unset in a thread between tests
            test = os.environ.get("PYTEST_CURRENT_TEST", "a thread of the session (").rsplit(" (", 1)[0]
            self.by_command.setdefault(command, set()).add(test)


COMMANDS_RUN = CommandsRun()


def documented(command: str) -> str:
    """``command``, after checking that a page shows it (a test passes its commands through this,
    and :data:`COMMANDS_RUN` records that it ran)."""
    assert command in shell_commands(), f"no page shows {command!r} any more: run what the docs show"
    COMMANDS_RUN.record(command)
    return command


def documented_argv(command: str, **values: str) -> List[str]:
    """The documented ``command`` split into arguments, each argument named in ``values``
    replaced (e.g. ``workspace=str(tmp_path)``: the test's own folder for the docs' ``workspace``)."""
    return [values.get(argument, argument) for argument in shlex.split(documented(command))]


def shown_outputs(marker: str) -> List[str]:
    """The output blocks (fenced without a language) of every page that contain ``marker``."""
    return [block for _, block in code_blocks("") if marker in block]


def table_rows(block: str) -> List[List[str]]:
    """The cells of each row of the tables printed on a terminal (``│``-separated). A table too
    wide for the terminal is printed in parts ("continued"), each repeating the rows' first cells:
    a part whose rows start as the previous table's do is joined to it, row by row."""
    tables: List[List[List[str]]] = []
    part: List[List[str]] = []
    for line in [*block.splitlines(), ""]:
        if "│" in line:
            part.append([cell.strip() for cell in line.split("│")[1:-1]])
            continue
        if part and tables and [row[0] for row in part] == [row[0] for row in tables[-1]]:
            tables[-1] = [row + other[1:] for row, other in zip(tables[-1], part)]
        elif part:
            tables.append(part)
        part = []
    return [row for table in tables for row in table]


NUMBER = re.compile(r"[-+]?\d+(?:\.(\d+))?")


def same_cell(shown: str, printed: str) -> bool:
    """Whether a page's cell says what the run printed: the same text, its decimal numbers allowed
    to differ by one unit of their last digit (a float summed in another order, rounded on the
    other side of a boundary); whole numbers (counts) exactly."""
    if NUMBER.sub("#", shown) != NUMBER.sub("#", printed):
        return False
    pairs = zip(NUMBER.finditer(shown), NUMBER.finditer(printed))
    return all(a.group() == b.group() if a.group(1) is None else
               abs(float(a.group()) - float(b.group())) <= 1.01 * 10 ** -len(a.group(1)) for a, b in pairs)


def missing_rows(shown_block: str, output: str) -> List[List[str]]:
    """The rows of a page's table that the run's printed tables lack (see :func:`same_cell`)."""
    printed = table_rows(output)
    return [row for row in table_rows(shown_block) if not any(
        len(row) == len(other) and all(map(same_cell, row, other)) for other in printed)]
