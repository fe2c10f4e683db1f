"""An unwritable workspace surfaced as a raw traceback from deep inside a run.

Tango 1.3.2. Test: ``tests/test_reliability.py::test_unwritable_workspace_fails_before_any_step``."""

import functools
from pathlib import Path

from tango.common.exceptions import ConfigurationError
from tango.workspaces import LocalWorkspace


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
