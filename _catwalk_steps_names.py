"""Lets ``tango run`` find ``catwalk::`` names in a config run without ``-i catwalk_steps`` and
without a ``tango.yml`` that names the package, from any folder, however catwalk-steps was
installed.

Tango 1.3.2 has no plugin discovery. For a registered name it does not know, it imports
``tango.integrations.<prefix>`` if that file is in Tango's own folder, then every module of the
current folder, then every integration of its own. That last search fails under transformers 5
(``cannot import name 'modeling_flax_auto'``) without a word of catwalk. A file of ours inside
Tango's folder would work only where both packages share one site-packages folder (not for
``--user``, editable or system-site-packages installs) and would collide with a Tango integration
of that name.

So the package installs ``catwalk_steps_names.pth`` beside itself (setup.py), which Python's
``site`` runs at start-up in every site-packages folder (a venv's, ``--user``'s, the system's) and
which imports this module. It costs one small stdlib import per interpreter: it only waits for
``tango.common.registrable`` to be imported, then wraps two of Tango's functions, and is the one
owner of each (``tango_fixes/`` patches neither):

- ``Registrable.search_modules``: an unknown ``catwalk::`` name imports ``catwalk_steps`` (which
  registers every step) before Tango's own search; and the names being searched for are kept in
  :data:`NAMES_SEARCHED`, which ``tango_fixes/integration_search.py`` reads.
- ``Params.from_file`` (how ``tango run`` reads a config): a config with ``catwalk::`` steps
  imports ``catwalk_steps`` before its step graph is built, so that an error there (a ref to a
  step that does not exist) is one line too (``tango_fixes/one_line_errors.py``); and a config
  that imports the package's Jsonnet helpers (``lib.libsonnet``), which plain ``tango run``
  cannot find, is refused in one line that names ``python -m catwalk_steps.run``, which can.

Nothing else is changed, and nothing runs in a process that never imports Tango.
Where ``site`` does not read the folder (``pip install --target`` on ``PYTHONPATH``), name the
package: ``tango run -i catwalk_steps`` or ``include_package: [catwalk_steps]`` in ``tango.yml``.
"""

import sys

REGISTRABLE = "tango.common.registrable"
PREFIX = "catwalk::"
#: The names Tango's search for an unknown registered name is looking for, innermost last.
NAMES_SEARCHED = []  # type: list[str]
#: Jsonnet's message for an import it cannot find.
UNRESOLVED_IMPORT = r"can't resolve (\S+) from "


def import_catwalk() -> None:
    import catwalk_steps  # noqa: F401  (registers the catwalk:: names, applies the Tango fixes)


def wrap_search_modules(registrable_class) -> None:
    """An unknown ``catwalk::`` name imports ``catwalk_steps`` first; every name searched for is
    noted in :data:`NAMES_SEARCHED` while Tango searches."""
    search_modules = registrable_class.search_modules.__func__

    def search_modules_importing_catwalk(cls, name: str):
        NAMES_SEARCHED.append(name)
        try:
            if name.startswith(PREFIX) and name not in cls.list_available():
                import_catwalk()
                if name in cls.list_available():
                    return None
            return search_modules(cls, name)
        finally:
            NAMES_SEARCHED.pop()

    search_modules_importing_catwalk.__wrapped__ = search_modules  # type: ignore[attr-defined]
    registrable_class.search_modules = classmethod(search_modules_importing_catwalk)


def wrap_from_file(params_class) -> None:
    """A config of ``catwalk::`` steps imports ``catwalk_steps`` once read; one that cannot find
    the package's Jsonnet helpers is refused, naming the command that finds them."""
    from_file = params_class.from_file.__func__

    def from_file_importing_catwalk(cls, params_file, *args, **kwargs):
        try:
            params = from_file(cls, params_file, *args, **kwargs)
        except RuntimeError as e:
            import re

            helper = re.match(UNRESOLVED_IMPORT, str(e))
            if helper is None or helper.group(1) not in catwalk_helpers():
                raise
            import_catwalk()
            from tango.common.exceptions import ConfigurationError

            raise ConfigurationError(
                f"{params_file} imports {helper.group(1)}, catwalk's Jsonnet helper, which plain tango run cannot find: "
                f"run it with python -m catwalk_steps.run {params_file} (and tango run's options), which can"
            ) from None
        steps = params.as_dict(quiet=True).get("steps")
        if isinstance(steps, dict) and any(str(step.get("type")).startswith(PREFIX)
                                           for step in steps.values() if isinstance(step, dict)):
            import_catwalk()
        return params

    from_file_importing_catwalk.__wrapped__ = from_file  # type: ignore[attr-defined]
    params_class.from_file = classmethod(from_file_importing_catwalk)


def catwalk_helpers() -> "list[str]":
    """The file names of the package's Jsonnet helpers, found without importing the package."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("catwalk_steps")
    folders = spec.submodule_search_locations if spec is not None else None
    return [path.name for folder in folders or [] for path in (Path(folder) / "configs").glob("*.libsonnet")]


def wrap_tango(registrable_module) -> None:
    wrap_search_modules(registrable_module.Registrable)
    wrap_from_file(sys.modules["tango.common.params"].Params)  # (registrable imports it)


class AfterRegistrableImport:
    """A meta path finder (``importlib.abc.MetaPathFinder``'s protocol; not imported, to keep
    start-up cheap) that finds ``tango.common.registrable`` as the other finders do, and runs
    :func:`wrap_tango` once the module has run: a post-import hook, which Python has none of."""

    def find_spec(self, name, path=None, target=None):
        if name != REGISTRABLE:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_wrap(module) -> None:
            exec_module(module)
            wrap_tango(module)

        spec.loader.exec_module = exec_then_wrap
        return spec


if REGISTRABLE in sys.modules:
    wrap_tango(sys.modules[REGISTRABLE])
elif not any(isinstance(finder, AfterRegistrableImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, AfterRegistrableImport())
