"""Tango keeps a step's work dir for ever, also once the step's result is in the cache: for a
fine-tuning step its checkpoints (weights and optimizer state, 3-4x the weights), for a
prediction step its journals (a second copy of the predictions). It has no hook for "the result
is safely cached". Here ``LocalWorkspace.step_finished`` (which writes the entry and marks it
complete) calls the step's ``clean_work_dir(work_dir)`` afterwards, if the step has one: a run
killed before that keeps everything it needs to resume, one killed after has its result.

Tango 1.3.2. Test: ``tests/test_cache_size.py``."""

import functools
import logging

from tango.workspaces import LocalWorkspace

logger = logging.getLogger(__name__)
_step_finished = LocalWorkspace.step_finished


@functools.wraps(_step_finished)
def _step_finished_then_clean(self: LocalWorkspace, step, result):
    result = _step_finished(self, step, result)
    clean = getattr(step, "clean_work_dir", None)
    if clean is not None and step.cache_results:
        try:
            clean(self.work_dir(step))
        except OSError as e:  # the result is cached; what is left only takes space
            logger.warning("Could not clean the work dir of %s: %s", step.name, e)
    return result


LocalWorkspace.step_finished = _step_finished_then_clean  # type: ignore[method-assign]
