"""A misspelt setting (``packng: true``) was refused as ``Extra parameters passed to
FinetuneStep: {'packng': True}``, leaving the user to find the right name. The refusal now names
the closest setting the class takes (``did you mean 'packing'?``), from the names Tango asked the
config for (``Params.pop``, which it calls for every argument a class takes).

Tango 1.3.2. Test: ``tests/test_tango_fixes.py::test_typos_get_tangos_own_message_under_the_installed_transformers``."""

import difflib
import functools

from tango.common.exceptions import ConfigurationError
from tango.common.params import Params

_ASKED = "_catwalk_asked"  # the keys a Params object was asked for, kept on it
_pop = Params.pop
_assert_empty = Params.assert_empty


@functools.wraps(_pop)
def _pop_noting_the_key(self: Params, key: str, *args, **kwargs):
    self.__dict__.setdefault(_ASKED, set()).add(key)
    return _pop(self, key, *args, **kwargs)


@functools.wraps(_assert_empty)
def _assert_empty_naming_the_closest(self: Params, name: str) -> None:
    try:
        _assert_empty(self, name)
    except ConfigurationError as e:
        asked = sorted(self.__dict__.get(_ASKED, ()))
        closest = {key: difflib.get_close_matches(key, asked, n=1) for key in self.params}
        hints = [f"{match[0]!r} for {key!r}" if len(closest) > 1 else repr(match[0])
                 for key, match in closest.items() if match]
        if not hints:
            raise
        raise ConfigurationError(f"{e} (did you mean {', '.join(hints)}?)") from None


Params.pop = _pop_noting_the_key  # type: ignore[method-assign]
Params.assert_empty = _assert_empty_naming_the_closest  # type: ignore[method-assign]
