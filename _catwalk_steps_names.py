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
``tango.common.registrable`` to be imported, then wraps ``Registrable.search_modules`` so that an
unknown ``catwalk::`` name imports ``catwalk_steps`` (which registers every step) before Tango's
own search. Nothing else is changed, and nothing runs in a process that never imports Tango.
Where ``site`` does not read the folder (``pip install --target`` on ``PYTHONPATH``), name the
package: ``tango run -i catwalk_steps`` or ``include_package: [catwalk_steps]`` in ``tango.yml``.
"""

import sys

REGISTRABLE = "tango.common.registrable"
PREFIX = "catwalk::"


def import_catwalk_for_its_names(registrable_class) -> None:
    """Wraps Tango's search for an unknown registered name: ``catwalk::`` names import
    ``catwalk_steps`` first."""
    search_modules = registrable_class.search_modules.__func__

    def search_modules_importing_catwalk(cls, name: str):
        if name.startswith(PREFIX) and name not in cls.list_available():
            import catwalk_steps  # noqa: F401  (registers the catwalk:: names)

            if name in cls.list_available():
                return None
        return search_modules(cls, name)

    registrable_class.search_modules = classmethod(search_modules_importing_catwalk)


class AfterRegistrableImport:
    """A meta path finder (``importlib.abc.MetaPathFinder``'s protocol; not imported, to keep
    start-up cheap) that finds ``tango.common.registrable`` as the other finders do, and runs
    :func:`import_catwalk_for_its_names` once the module has run: a post-import hook, which
    Python has none of."""

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
            import_catwalk_for_its_names(module.Registrable)

        spec.loader.exec_module = exec_then_wrap
        return spec


if REGISTRABLE in sys.modules:
    import_catwalk_for_its_names(sys.modules[REGISTRABLE].Registrable)
elif not any(isinstance(finder, AfterRegistrableImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, AfterRegistrableImport())
