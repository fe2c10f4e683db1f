"""Narrow fixes for Tango 1.3.2 (its last release), one module per fix, each with its reason and
its test. They are applied when the package is imported: Tango imports it through
``include_package`` before it builds the step graph, and ``catwalk_steps/__init__.py`` imports
this package first."""

import importlib.metadata
import warnings

from . import (  # noqa: F401  (each patches Tango on import)
    damaged_entries,
    durable_cache_entries,
    environment_metadata,
    integration_search,
    killed_step_state,
    one_line_errors,
    package_walk,
    registered_runs,
    setting_names,
    setting_types,
    wait_for_running_step,
    work_dir_cleanup,
    writable_workspace,
)

FIXED_VERSION = "1.3.2"

if importlib.metadata.version("ai2-tango") != FIXED_VERSION:
    warnings.warn(
        f"catwalk_steps patches ai2-tango {FIXED_VERSION}, but {importlib.metadata.version('ai2-tango')} is "
        "installed: check each fix in catwalk_steps/tango_fixes/ against it",
        stacklevel=2,
    )
