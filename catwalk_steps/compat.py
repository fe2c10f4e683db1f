"""Narrow fixes for Tango 1.3.2, applied when the package is imported (Tango imports it through
``include_package`` before it builds the step graph)."""

import functools
import importlib.metadata
import json
import logging
import re
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

from sqlitedict import SqliteDict
from tango.common import registrable, util
from tango.common.exceptions import ConfigurationError, IntegrationMissingError
from tango.common.file_lock import FileLock
from tango.common.registrable import Registrable
from tango.step import Step
from tango.step_caches import LocalStepCache
from tango.step_info import EnvironmentMetadata, GitMetadata, StepInfo, StepState
from tango.workspaces import LocalWorkspace


def git_metadata_or_none() -> Optional[GitMetadata]:
    """Tango records the git commit and ``origin`` URL of the working directory with every step,
    and crashes the whole run in a repository with no commit yet or no ``origin`` remote. Such a
    repository is recorded as no repository."""
    try:
        return GitMetadata.check_for_repo()
    except ValueError:
        return None


def pip_packages() -> List[Tuple[str, str]]:
    """The installed distributions as Tango records them (``pkg_resources`` keys and versions),
    read with ``importlib.metadata``: Tango's ``pkg_resources`` prints a deprecation warning at
    the top of every run, and is gone from setuptools 81 on (then Tango logs an error per step)."""
    found: Dict[str, str] = {}
    for dist in importlib.metadata.distributions():  # in sys.path order: the first one wins
        name = dist.metadata["Name"]
        if name:
            found.setdefault(re.sub(r"[^A-Za-z0-9.]+", "-", name).lower(), dist.version)
    return sorted(found.items())


_environment_init = EnvironmentMetadata.__init__


@functools.wraps(_environment_init)
def _environment_init_patched(self, *args, **kwargs) -> None:
    # The dataclass captured Tango's functions as default factories; pass the fields instead.
    if "packages" not in kwargs and len(args) < 5:
        kwargs["packages"] = pip_packages()
    if "git" not in kwargs and len(args) < 5:
        kwargs["git"] = git_metadata_or_none()
    _environment_init(self, *args, **kwargs)


EnvironmentMetadata.__init__ = _environment_init_patched  # type: ignore[method-assign]

logger = logging.getLogger(__name__)
_import_module_and_submodules = registrable.import_module_and_submodules
_search_modules = Registrable.search_modules.__func__  # type: ignore[attr-defined]
_names_searched: List[str] = []
_unimportable: Dict[str, ImportError] = {}


def _import_or_skip_integration(module: str, *args, **kwargs) -> None:
    """Tango's search for an unknown registered name (a typo in a ``type``) imports every Tango
    integration, and stops at the first that fails on an incompatible library version
    (``tango.integrations.transformers`` under transformers 5: no ``modeling_flax_auto``), so the
    user saw that ImportError instead of Tango's "not in acceptable choices". Such an integration
    is skipped as missing (what it registered before failing is unlisted), unless the name searched
    for is one of its own (``transformers::...``). Its failure is remembered: a second import
    would fail on registering the same names again."""
    integration = module.rsplit(".", 1)[-1]
    if not module.startswith("tango.integrations."):
        return _import_module_and_submodules(module, *args, **kwargs)
    if module not in _unimportable:
        registered = {cls: set(names) for cls, names in Registrable._registry.items()}
        try:
            return _import_module_and_submodules(module, *args, **kwargs)
        except ImportError as e:
            if not e.name or e.name.split(".")[0] == "tango":  # a bug in Tango itself: show it
                raise
            _unimportable[module] = e
            for cls, names in Registrable._registry.items():  # unlist what it registered before failing
                for name in set(names) - registered.get(cls, set()):
                    del names[name]
    if _names_searched and _names_searched[-1].split("::")[0] == integration:
        raise _unimportable[module]
    logger.debug("skipping the %s integration: %s", integration, _unimportable[module])
    raise IntegrationMissingError(integration) from _unimportable[module]


registrable.import_module_and_submodules = _import_or_skip_integration


@classmethod  # type: ignore[misc]
@functools.wraps(_search_modules)
def _search_modules_noting_name(cls, name: str):
    _names_searched.append(name)
    try:
        return _search_modules(cls, name)
    finally:
        _names_searched.pop()


Registrable.search_modules = _search_modules_noting_name  # type: ignore[method-assign,assignment]


def _wait_lock(workspace: LocalWorkspace, step: Step) -> FileLock:
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
    with _wait_lock(workspace, self).acquire_with_updates(desc=f"waiting for another run of '{self.name}'"):
        if self in workspace.step_cache:
            return workspace.step_cache[self]
        return _run_with_work_dir(self, workspace, needed_by=needed_by)


Step._run_with_work_dir = _run_with_work_dir_or_wait  # type: ignore[method-assign]

_local_workspace_init = LocalWorkspace.__init__


@functools.wraps(_local_workspace_init)
def _local_workspace_init_checked(self, dir, *args, **kwargs) -> None:
    """A workspace that cannot be written fails with one clear line, before any step runs."""
    try:
        _local_workspace_init(self, dir, *args, **kwargs)
        probe = Path(dir) / ".write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigurationError(f"Workspace {dir} is not a writable directory: {e}") from None


LocalWorkspace.__init__ = _local_workspace_init_checked  # type: ignore[method-assign]

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


_walk_package = util.import_module_and_submodules


def _import_package_without_walking_ours(package_name: str, exclude=None, recursive: bool = True) -> None:
    """``include_package`` imports every submodule of a package, for their registrations. Ours
    are all made by ``catwalk_steps/__init__.py``, and the walk would also import the modules that
    train or build models (transformers, peft, sklearn: 3 s), which a run whose steps are all
    cached never uses. Steps import those where they run."""
    if package_name.startswith(f"{__package__}."):
        return
    _walk_package(package_name, exclude=exclude, recursive=recursive)


util.import_module_and_submodules = _import_package_without_walking_ours
