"""Registering a run rewrote every step's database record with a stale copy, so a run started
while another computed a step made the first fail its own consistency check.

Tango 1.3.2. Test: ``tests/test_end_to_end.py::test_four_concurrent_processes_compute_every_step_once``."""

import json
from typing import Iterable

from sqlitedict import SqliteDict
from tango.common.file_lock import FileLock
from tango.step import Step
from tango.step_info import StepInfo
from tango.workspaces import LocalWorkspace


def _save_registered_run_without_clobbering(self, name: str, all_steps: Iterable[Step]) -> None:
    """Registering a run rewrote every step's record with the copy it had just read, so a
    second ``tango run`` starting while the first computes a step put that step back to
    "incomplete", and the first run then failed Tango's own consistency check. Here records are
    only added, never rewritten (Tango only refreshed their display name), and under a lock, so
    that two runs cannot both find a record missing."""
    step_unique_ids = {}
    with FileLock(str(self.step_info_file) + ".lock"), SqliteDict(self.step_info_file) as d:
        for step in all_steps:
            if step.unique_id not in d:
                d[step.unique_id] = StepInfo.new_from_step(step)
            step_unique_ids[step.name] = step.unique_id
        d.commit()
    self._run_step_info_file(name).write_text(json.dumps(step_unique_ids))


LocalWorkspace._save_registered_run = _save_registered_run_without_clobbering  # type: ignore[method-assign]
