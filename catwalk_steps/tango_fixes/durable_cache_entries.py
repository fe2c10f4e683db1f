"""Tango's own cache write (``LocalStepCache.__setitem__``, then ``step_finished``'s record) on a
full disk, or cut off by a crash, could leave a step taken for complete whose result was never
written (Tango's PR #429 met the record side when a disk filled). In 1.3.2:

- it puts the value into its in-memory cache *before* renaming ``cache-metadata.json`` into
  place, so when that rename (or anything after the format's write) fails, this process still
  finds the step in its cache and hands out a result that is not on disk: the value is now
  dropped from memory when the write fails;
- it neither fsyncs ``cache-metadata.json`` nor the entry's directory, while the SQLite record
  that says "completed", committed right after, is fsynced: after a crash the record could say
  complete with no entry behind it (``IOError: ... marked as being completed``, and a directory to
  delete by hand). The file and the directory are now fsynced before the record is written;
- a full disk while writing ``cache-metadata.json`` raised ``[Errno 28] No space left on
  device`` without a path: it now names the file;
- when marking the step failed fails as well (SQLite on the same full disk: ``database or disk is
  full``), that error replaced the step's own (our one-line disk-full message). It is now logged
  as a warning, and the step's own error is raised; the record still says running, which the next
  run resets to incomplete (:mod:`.killed_step_state`).

Tango 1.3.2. Test: ``tests/test_full_disk.py::test_tangos_cache_write_on_a_full_disk``."""

import errno
import functools
import logging
import os

from tango.step_caches import LocalStepCache
from tango.workspaces import LocalWorkspace

logger = logging.getLogger(__name__)
_setitem, _step_failed = LocalStepCache.__setitem__, LocalWorkspace.step_failed


@functools.wraps(_setitem)
def _setitem_durably(self: LocalStepCache, step, value) -> None:
    metadata = self.step_dir(step) / self.METADATA_FILE_NAME
    try:
        _setitem(self, step, value)
    except OSError as e:
        self._remove_from_cache(step.unique_id)
        if e.errno == errno.ENOSPC and not e.filename:
            raise OSError(e.errno, "No space left on device while caching the result", str(metadata)) from e
        raise
    except BaseException:
        self._remove_from_cache(step.unique_id)
        raise
    for path in (metadata, metadata.parent):  # the entry's file, then its name in the directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@functools.wraps(_step_failed)
def _step_failed_keeping_its_error(self: LocalWorkspace, step, e: BaseException) -> None:
    try:
        _step_failed(self, step, e)
    except Exception as recording:  # noqa: BLE001 (the step's own error is what the user must see)
        logger.warning("Could not record that '%s' failed in %s (%s); the next run will run it again",
                       step.name, self.step_info_file, recording)


LocalStepCache.__setitem__ = _setitem_durably  # type: ignore[method-assign]
LocalWorkspace.step_failed = _step_failed_keeping_its_error  # type: ignore[method-assign]
