"""Tango records the environment with every step: the git commit and ``origin`` URL (which
crashed the run in a repository without a commit or without ``origin``), and the installed
packages through ``pkg_resources`` (a deprecation warning atop every run; gone from setuptools 81).

Tango 1.3.2. Test: ``tests/test_tango_fixes.py::test_step_metadata_survives_a_repository_without_commit_or_origin, ::test_packages_are_recorded_without_pkg_resources``."""

import functools
import importlib.metadata
import re
from typing import Dict, List, Optional, Tuple

from tango.step_info import EnvironmentMetadata, GitMetadata


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
