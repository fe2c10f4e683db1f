"""A step killed while writing its result (leaving a temp file in its step dir) blocked every
later run with ``StepStateError``.

Tango 1.3.2. Test: ``tests/test_reliability.py::test_killed_while_writing_a_result_leaves_no_cache_entry``."""

from pathlib import Path
from typing import Set

from tango.step_caches import LocalStepCache
from tango.step_info import StepState
from tango.workspaces import LocalWorkspace


_guess_step_dir_state = LocalWorkspace.guess_step_dir_state.__func__  # type: ignore[attr-defined]


def _guess_step_dir_state_after_kills(cls, dir: Path) -> Set[StepState]:
    """Tango takes any file in a step dir besides the lock as a sign that the step may still be
    running, so a process killed while writing its result (leaving a temp file) blocks every
    later run with ``StepStateError``. With the lock free and no cache metadata, the step is
    neither running nor complete: it is incomplete and may run again."""
    guesses = _guess_step_dir_state(cls, dir)
    if guesses == set(StepState) and not (dir / LocalStepCache.METADATA_FILE_NAME).exists():
        return {StepState.INCOMPLETE, StepState.FAILED}
    return guesses


LocalWorkspace.guess_step_dir_state = classmethod(_guess_step_dir_state_after_kills)  # type: ignore[method-assign]
