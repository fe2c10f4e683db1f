"""What the README and the docs pages show, read from their Markdown, so that a test runs a
command or a config as it is written there: change one and a test fails until the other follows
(``tests/test_docs.py`` checks that every command shown is run by a test)."""

import re
import shlex
from pathlib import Path
from typing import Dict, List, Tuple

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


def shell_commands(pages: List[Path] = PAGES) -> Dict[str, Path]:
    """Every command of every ``bash`` block (continuation lines joined, comments cut), with the
    page that shows it."""
    commands = {}
    for page, text in code_blocks("bash", pages):
        for line in text.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+", " ", line.split(" #")[0]).strip()
            if command and not command.startswith("#"):
                commands[command] = page
    return commands


def documented(command: str) -> str:
    """``command``, after checking that a page shows it (a test passes its commands through this,
    and test_docs.py finds them by it)."""
    assert command in shell_commands(), f"no page shows {command!r} any more: run what the docs show"
    return command


def documented_argv(command: str, **values: str) -> List[str]:
    """The documented ``command`` split into arguments, each argument named in ``values``
    replaced (e.g. ``workspace=str(tmp_path)``: the test's own folder for the docs' ``workspace``)."""
    return [values.get(argument, argument) for argument in shlex.split(documented(command))]


def shown_outputs(marker: str) -> List[str]:
    """The output blocks (fenced without a language) of every page that contain ``marker``."""
    return [block for _, block in code_blocks("") if marker in block]


def table_rows(block: str) -> List[List[str]]:
    """The cells of each row of a table printed on a terminal (``│``-separated). A table too wide
    for the terminal is printed in parts ("continued"), each starting with the row's label: a
    row's later parts are joined to its first."""
    rows: Dict[str, List[str]] = {}
    for line in block.splitlines():
        if "│" in line:
            label, *cells = [cell.strip() for cell in line.split("│")[1:-1]]
            rows.setdefault(label, []).extend(cells)
    return [[label, *cells] for label, cells in rows.items()]
