"""Every name this package registers resolves to a subclass of its registry's base class (a
decorator on the wrong object, e.g. a helper function, would register that object instead)."""

import inspect

import pytest
import torch
from tango.common import Registrable
from tango.integrations.torch import LRScheduler, Optimizer

import catwalk_steps  # noqa: F401  (registers everything)

# Tango's optimizer and scheduler registries hold torch's own classes (``torch::AdamW``), as ours do.
CLASS_OF_REGISTRY = {Optimizer: torch.optim.Optimizer, LRScheduler: torch.optim.lr_scheduler.LRScheduler}


def test_every_catwalk_name_resolves_to_a_subclass_of_its_registry_base():
    checked = 0
    for base, names in Registrable._registry.items():
        for name, (registered, _constructor) in names.items():
            module = getattr(registered, "__module__", "") or ""
            if not (name.startswith("catwalk::") or module.startswith("catwalk_steps")):
                continue
            expected = CLASS_OF_REGISTRY.get(base, base)
            assert inspect.isclass(registered) and issubclass(registered, expected), (
                f"{name!r} in {base.__name__}'s registry is {registered!r}, not a subclass of {expected.__name__}"
            )
            checked += 1
    assert checked >= 20  # steps, formats, tasks, schedulers: a registry walk that finds nothing is no check


def test_callbacks_name_each_hook():
    import pytest

    from catwalk_steps.training.callbacks import Callbacks

    with pytest.raises(AttributeError):
        Callbacks([]).pre_bacth(0, 0, None)  # a misspelled hook is an error, not a silent no-op


def test_a_second_request_kind_of_a_registered_name_is_refused():
    from catwalk_steps.kinds import KINDS
    from catwalk_steps.kinds.base import register

    generation = KINDS["generate_until"]
    assert register(generation) is generation  # the same kind again: nothing changes
    impostor = type("Impostor", (type(generation),), {})()
    with pytest.raises(ValueError, match="'generate_until' is registered already: Generation"):
        register(impostor)
    assert KINDS["generate_until"] is generation
