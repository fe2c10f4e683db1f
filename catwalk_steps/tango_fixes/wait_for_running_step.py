"""A second ``tango run`` reaching a step that another process computes failed at once with
``StepStateError``; it now waits, then takes the result from the cache.

Tango 1.3.2. Test: ``tests/test_reliability.py::test_concurrent_runs_train_once_and_share_the_result``."""

import functools

from tango.common.file_lock import FileLock
from tango.step import Step
from tango.workspaces import LocalWorkspace


def wait_lock(workspace: LocalWorkspace, step: Step) -> FileLock:
    # Not Tango's own per-step lock, which a second process fails on at once; and outside the
    # cache dir, where Tango expects only step dirs.
    return FileLock(workspace.dir / "catwalk-locks" / f"{step.unique_id}.lock")


_run_with_work_dir = Step._run_with_work_dir


@functools.wraps(_run_with_work_dir)
def _run_with_work_dir_or_wait(self: Step, workspace, needed_by=None):
    """A second ``tango run`` that reaches a step another process is computing waits for it
    and then takes its result from the cache; Tango 1.3.2 fails with ``StepStateError`` instead.
    The wait lock is an OS file lock, so a killed process leaves no stale lock behind."""
    if not self.cache_results or not isinstance(workspace, LocalWorkspace):
        return _run_with_work_dir(self, workspace, needed_by=needed_by)
    with wait_lock(workspace, self).acquire_with_updates(desc=f"waiting for another run of '{self.name}'"):
        if self in workspace.step_cache:
            return workspace.step_cache[self]
        return _run_with_work_dir(self, workspace, needed_by=needed_by)


Step._run_with_work_dir = _run_with_work_dir_or_wait  # type: ignore[method-assign]
