"""Tango puts the module of a step's class, and of its format's, into every cache key
(``Step.unique_id`` hashes step references as ``(module, class, id)`` and the format as
``(module, class)``), and writes the format's module path into each entry's
``cache-metadata.json`` to read it back with. So moving a class to another module would change
every cache key and leave every existing entry unreadable. :func:`keep_class_path` pins a
class to the path it was first published at.

Tango 1.3.2. Test: ``tests/test_cache_keys.py``."""

import sys
from typing import Callable, TypeVar

from tango.format import Format

T = TypeVar("T", bound=type)


def keep_class_path(path: str) -> Callable[[T], T]:
    """Makes Tango hash and record ``cls`` as ``path`` (``package.module.ClassName``), and, for a
    format, read entries that name ``path`` back with ``cls`` (registered under that name, since
    the registry is searched before a dotted path is imported)."""
    module, _, name = path.rpartition(".")
    # One string object per module, as a module's own classes share its ``__name__``: the keys
    # are hashes of pickles, and a pickle writes a string it has seen as a back-reference.
    module = sys.intern(module)

    def pin(cls: T) -> T:
        if cls.__qualname__ != name:
            raise ValueError(f"{path} does not name {cls.__qualname__}")
        cls.__module__ = module
        if issubclass(cls, Format):
            Format.register(path)(cls)
        return cls

    return pin
