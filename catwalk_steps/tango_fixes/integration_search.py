"""A typo in a step or task ``type`` made Tango import every integration, and its transformers
integration fails to import under transformers 5: the user saw a ``modeling_flax_auto``
ImportError instead of "not in acceptable choices".

The fix replaces ``import_module_and_submodules`` as Tango's search calls it (the name in
``tango.common.registrable``; :mod:`.package_walk` owns the name in ``tango.common.util``), and
reads the name being searched for from the start-up hook (``_catwalk_steps_names.py``), the one
owner of ``Registrable.search_modules``.

Tango 1.3.2. Test: ``tests/test_tango_fixes.py::test_typos_get_tangos_own_message_under_the_installed_transformers``."""

import functools
import logging
from typing import Dict

from tango.common import registrable
from tango.common.exceptions import IntegrationMissingError
from tango.common.registrable import Registrable

from _catwalk_steps_names import NAMES_SEARCHED  # (installed beside the package; importing it wraps the search)

logger = logging.getLogger(__name__)

_import_module_and_submodules = registrable.import_module_and_submodules
_unimportable: Dict[str, ImportError] = {}


@functools.wraps(_import_module_and_submodules)
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
    if NAMES_SEARCHED and NAMES_SEARCHED[-1].split("::")[0] == integration:
        raise _unimportable[module]
    logger.debug("skipping the %s integration: %s", integration, _unimportable[module])
    raise IntegrationMissingError(integration) from _unimportable[module]


registrable.import_module_and_submodules = _import_or_skip_integration
