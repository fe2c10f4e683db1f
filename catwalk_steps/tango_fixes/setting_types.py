"""A config value of the wrong type was taken silently: a string where a list is meant became a
list of its characters (``until: "Q:"`` the stops ``Q`` and ``:``, ``wandb_tags: "gpt2"`` four
tags), ``limit: "5"`` reached the step as a string, and a string where an object is meant
(``data_files: "v.jsonl"``) failed with a ``TypeError``. Such a value is now refused when the step
graph is built, in one line naming the setting and the fix.

Tango 1.3.2. Tests: ``tests/test_tango_fixes.py::test_a_setting_of_the_wrong_type_is_refused_naming_it``,
``tests/test_generative_tasks.py::test_until_given_as_a_string_is_refused``,
``tests/test_tracking.py::test_wandb_tags_given_as_a_string_are_refused``."""

import collections.abc
import functools
import json
import typing
from typing import Any, Optional

from tango.common import from_params
from tango.common.exceptions import ConfigurationError
from tango.common.params import Params

#: Annotations whose value Tango iterates: a string there would become its characters.
LISTS = {list, tuple, set, frozenset, collections.abc.Iterable, collections.abc.Sequence, collections.abc.Set}
MAPPINGS = {dict, collections.abc.Mapping, collections.abc.MutableMapping}
#: Plain annotations whose value Tango passes on unchecked, and what a JSON value of each is.
SCALARS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}

_construct_arg = from_params.construct_arg


def without_none(annotation: Any) -> Any:
    """``X`` for ``Optional[X]``; other annotations as they are."""
    if typing.get_origin(annotation) is typing.Union:
        kinds = [kind for kind in typing.get_args(annotation) if kind is not type(None)]
        if len(kinds) == 1:
            return kinds[0]
    return annotation


def fits(value: Any, kind: type) -> bool:
    """Whether a config value is of the scalar ``kind`` (an integer is a number; a boolean is neither)."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, (int, float) if kind is float else kind)


def list_expected(setting: str, value: str) -> ConfigurationError:
    """The error for a string given as ``setting`` (``"GenerationTask: until"``), a list."""
    return ConfigurationError(
        f"{setting} must be a list, got the string {value!r}: write [{json.dumps(value)}] for one item"
    )


def type_problem(annotation: Any, value: Any) -> Optional[str]:
    """Why ``value`` cannot be a setting annotated ``annotation``, if it is a plain value of the
    wrong kind: a string for a list, a plain value for an object, or a scalar of another type.
    Steps and registrables (given by name, a dict or a ``ref``) are left to Tango."""
    kind = without_none(annotation)
    if value is None or isinstance(value, (dict, Params)) or not isinstance(value, (str, int, float, list)):
        return None
    if isinstance(value, str) and (typing.get_origin(kind) or kind) in LISTS:
        return "list"
    if (typing.get_origin(kind) or kind) in MAPPINGS:
        return f"must be an object ({{name: value, ...}}), got {value!r}"
    if kind in SCALARS and not fits(value, kind):
        return f"must be {SCALARS[kind]}, got {value!r}"
    return None


@functools.wraps(_construct_arg)
def construct_checked_arg(class_name: str, argument_name: str, popped_params: Any, annotation: Any, default: Any,
                          *args: Any, **kwargs: Any) -> Any:
    """Tango's ``construct_arg``, refusing a plain value of the wrong type (:func:`type_problem`)
    instead of passing it on, or iterating a string's characters into a list."""
    if popped_params is not default:
        problem = type_problem(annotation, popped_params)
        if problem == "list":
            raise list_expected(f"{class_name}: {argument_name}", popped_params)
        if problem is not None:
            raise ConfigurationError(f"{class_name}: {argument_name} {problem}")
    return _construct_arg(class_name, argument_name, popped_params, annotation, default, *args, **kwargs)


from_params.construct_arg = construct_checked_arg  # type: ignore[assignment]
