"""`tango run` in a subprocess, exactly as a user runs it, offline, and what to read from its
output: shared by the end-to-end tests and the sweep's tests."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .conftest import REPO
from .documented import documented_argv

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
TANGO = str(Path(sys.executable).with_name("tango"))
SWEEP = "configs/sweep_tiny.jsonnet"


def tango_run(config: str, workspace: Path, name: str, *options: str, env: Optional[Dict[str, str]] = None) -> str:
    started = time.perf_counter()
    done = subprocess.run(
        [TANGO, "run", config, "-w", str(workspace), "--name", name, *options],
        cwd=REPO,
        env={**os.environ, **OFFLINE, "COLUMNS": "200", **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(f"tango run {config} ({name}): {time.perf_counter() - started:.1f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def documented_run(command: str, workspace: Path, name: str, *options: str, env: Optional[Dict[str, str]] = None) -> str:
    """A ``tango run CONFIG -w workspace`` command as a page shows it, in the test's workspace."""
    tango, run, config, w, _ = documented_argv(command)
    assert (tango, run, w) == ("tango", "run", "-w"), command
    return tango_run(config, workspace, name, *options, env=env)


def export_to(directory: Path, diffs: Sequence[str] = ()) -> List[str]:
    """Options that send catwalk::export_predictions's files (and those of the ``diffs``,
    catwalk::export_diff steps) to ``directory``, not the repository."""
    overrides = {"steps.export.output_dir": str(directory)}
    overrides.update({f"steps.{diff}.output_dir": str(directory / "diffs" / diff) for diff in diffs})
    return ["-o", json.dumps(overrides)]


def started_steps(output: str) -> List[str]:
    return re.findall(r'Starting step "([^"]+)"', output)
