"""A cache entry damaged on disk (weights that fail their checksum, JSON that does not parse)
failed every run that needed it until someone deleted a hashed directory by hand. Here a step's
entry is read before Tango uses it; a damaged one is moved aside (kept, under
``WORKSPACE/damaged/``, with a warning naming both paths) and the step computed again.

A format says "damaged" by raising :class:`CorruptCacheError` (Tango has no such notion); any
other error while reading still fails the run. A cached rerun therefore reads every cached step
of the config (the weights' checksum included), not only those a computed step needs.

Tango 1.3.2. Test: ``tests/test_reliability.py::test_damaged_entries_are_set_aside_and_computed_again``."""

import functools
import json
import logging
import shutil
from datetime import datetime, timezone
from typing import Optional

from sqlitedict import SqliteDict
from tango.common.file_lock import FileLock
from tango.step import Step
from tango.step_caches import LocalStepCache
from tango.workspaces import LocalWorkspace

from .wait_for_running_step import wait_lock

logger = logging.getLogger(__name__)


class CorruptCacheError(RuntimeError):
    """A cached result whose files do not match what was written: a format's ``read`` raises it."""


def _damage(workspace: LocalWorkspace, step: Step) -> Optional[str]:
    """Why ``step``'s complete entry cannot be read, or ``None`` when it can (its value is then in
    the cache's memory, so the read is not repeated)."""
    metadata = workspace.step_cache.step_dir(step) / LocalStepCache.METADATA_FILE_NAME
    try:  # Tango reads it through jsonnet, whose errors are bare RuntimeErrors
        json.loads(metadata.read_bytes())
    except FileNotFoundError:
        pass  # the value is in memory
    except ValueError as e:
        return f"{metadata} is not valid JSON ({e})"
    try:
        workspace.step_cache[step]
    except CorruptCacheError as e:
        return str(e)
    return None


def _set_aside(workspace: LocalWorkspace, step: Step, damage: str) -> None:
    entry = workspace.step_cache.step_dir(step)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    aside = workspace.dir / "damaged" / f"{step.unique_id}.{stamp}"
    aside.parent.mkdir(exist_ok=True)
    shutil.move(str(entry), str(aside))
    # Tango's record says "completed"; with the entry gone it must say "incomplete" (no start or end).
    with FileLock(str(workspace.step_info_file) + ".lock"), SqliteDict(workspace.step_info_file) as records:
        if step.unique_id in records:
            record = records[step.unique_id]
            record.start_time = record.end_time = record.error = record.result_location = None
            records[step.unique_id] = record
            records.commit()
    logger.warning("%s; moved the cache entry %s to %s, and computing '%s' again", damage, entry, aside, step.name)


def _heal(step: Step, workspace) -> None:
    if not step.cache_results or not isinstance(workspace, LocalWorkspace) or step not in workspace.step_cache:
        return
    if _damage(workspace, step) is None:
        return
    # Under the lock that a process computing the step holds: another run may have healed it meanwhile.
    with wait_lock(workspace, step).acquire_with_updates(desc=f"waiting for another run of '{step.name}'"):
        damage = _damage(workspace, step) if step in workspace.step_cache else None
        if damage is not None:
            _set_aside(workspace, step, damage)


def _default(workspace):
    from tango.workspaces import default_workspace

    return workspace if workspace is not None else default_workspace


_result, _ensure_result = Step.result, Step.ensure_result


@functools.wraps(_result)
def _result_healed(self: Step, workspace=None, needed_by=None):
    workspace = _default(workspace)
    _heal(self, workspace)
    return _result(self, workspace, needed_by=needed_by)


@functools.wraps(_ensure_result)
def _ensure_result_healed(self: Step, workspace=None) -> None:
    workspace = _default(workspace)
    _heal(self, workspace)
    return _ensure_result(self, workspace)


Step.result = _result_healed  # type: ignore[method-assign]
Step.ensure_result = _ensure_result_healed  # type: ignore[method-assign]
