"""Narrow fixes for Tango 1.3.2, applied when the package is imported (Tango imports it through
``include_package`` before it builds the step graph)."""

import functools
from typing import Optional

from tango.step_info import EnvironmentMetadata, GitMetadata


def git_metadata_or_none() -> Optional[GitMetadata]:
    """Tango records the git commit and ``origin`` URL of the working directory with every step,
    and crashes the whole run in a repository with no commit yet or no ``origin`` remote. Such a
    repository is recorded as no repository."""
    try:
        return GitMetadata.check_for_repo()
    except ValueError:
        return None


_environment_init = EnvironmentMetadata.__init__


@functools.wraps(_environment_init)
def _environment_init_with_safe_git(self, *args, **kwargs) -> None:
    # The dataclass captured ``check_for_repo`` as its default factory; pass the field instead.
    if "git" not in kwargs and len(args) < 5:
        kwargs["git"] = git_metadata_or_none()
    _environment_init(self, *args, **kwargs)


EnvironmentMetadata.__init__ = _environment_init_with_safe_git  # type: ignore[method-assign]
