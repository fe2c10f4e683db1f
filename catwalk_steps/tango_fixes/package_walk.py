"""``include_package`` imported every submodule of our package, and with them transformers, peft
and scikit-learn (3 s), also in a run whose steps are all cached. The fix replaces
``import_module_and_submodules`` in ``tango.common.util``, whose walk calls it for each submodule
(:mod:`.integration_search` owns the name in ``tango.common.registrable``).

Tango 1.3.2. Test: ``tests/test_tango_fixes.py::test_include_package_registers_everything_without_importing_the_heavy_modules``."""

import functools

from tango.common import util


_walk_package = util.import_module_and_submodules


@functools.wraps(_walk_package)
def _import_package_without_walking_ours(package_name: str, exclude=None, recursive: bool = True) -> None:
    """``include_package`` imports every submodule of a package, for their registrations. Ours
    are all made by ``catwalk_steps/__init__.py``, and the walk would also import the modules that
    train or build models (transformers, peft, sklearn: 3 s), which a run whose steps are all
    cached never uses. Steps import those where they run."""
    if package_name.startswith(f"{__package__.split('.')[0]}."):
        return
    _walk_package(package_name, exclude=exclude, recursive=recursive)


util.import_module_and_submodules = _import_package_without_walking_ours
