"""Command-line flags for a step's settings, derived from its ``run()`` signature: every setting a
config can give the step, a new one too, is a flag of the same name taking the same value, so a
command's steps have the config's cache keys. A flag's help is the setting's documentation (its
first sentence) and the step's default; a flag left out is left out of the step, as in a config.

A value is read as a config writes it: JSON (``true``, ``8``, ``1e-4``, ``null``, ``{"type": "lora",
"r": 8}``) where the setting's type takes that, else the text itself (a string setting). A yes/no
setting alone means true (``--packing``), a registrable one (an optimizer, a callback) takes a
registered name alone (``--callbacks wandb::log``), and a list takes its items one after another."""

import argparse
import ast
import inspect
import json
import re
import textwrap
from typing import Any, Callable, Collection, Dict, List, Optional, Union, get_args, get_origin, get_type_hints

from tango.common import Registrable
from tango.common.lazy import Lazy

#: ``:param name: text`` of a docstring, up to the next field or the end.
PARAM = re.compile(r":param (\w+):(.*?)(?=\n\s*:\w|\Z)", re.S)
#: A first sentence ends at a full stop before a capital (not "e.g." nor "i.e.").
SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z])")


def settings(run: Callable) -> Dict[str, inspect.Parameter]:
    """A step's settings: the keyword-only parameters of its ``run()`` (before them, what the
    command itself builds: the model, the tasks)."""
    return {name: p for name, p in inspect.signature(run).parameters.items() if p.kind is p.KEYWORD_ONLY}


def setting_docs(run: Callable, documented_by: Optional[type] = None) -> Dict[str, str]:
    """The documentation of each setting: the ``:param name:`` fields of ``run()``'s docstring,
    and the attribute docstrings of ``documented_by`` (a dataclass whose fields are the settings,
    as :class:`catwalk_steps.training.settings.FinetuneSettings`), whitespace runs one space."""
    docs = {name: text for name, text in PARAM.findall(inspect.getdoc(run) or "")}
    if documented_by is not None:
        body = ast.parse(textwrap.dedent(inspect.getsource(documented_by))).body[0].body  # type: ignore[attr-defined]
        for field, doc in zip(body, body[1:]):
            if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                docs[field.target.id] = doc.value.value  # type: ignore[union-attr]
    return {name: " ".join(text.split()) for name, text in docs.items()}


def help_text(doc: str) -> str:
    """A setting's documentation as a flag's help: its first sentence, without reST markup, with
    ``%`` escaped for argparse."""
    plain = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc).replace("``", "")
    return SENTENCE_END.split(plain, 1)[0].rstrip(".").replace("%", "%%")


def add_step_flags(parser: Any, run: Callable, docs: Dict[str, str], taken: Collection[str] = ()) -> List[str]:
    """Adds to ``parser`` (an ``ArgumentParser`` or one of its argument groups) a flag for each
    setting of the step whose ``run()`` this is, but those ``taken`` (the command's own flags, or
    another step's of the same name); returns the settings it added."""
    added = []
    types = get_type_hints(run)  # the annotations as types, also where a module postpones them
    for name, parameter in settings(run).items():
        if name in taken:
            continue
        parser.add_argument(
            f"--{name}", default=argparse.SUPPRESS, metavar="VALUE", **value_arguments(types.get(name, Any)),
            help=f"{help_text(docs.get(name, ''))} (default: {json.dumps(parameter.default, default=str)})",
        )
        added.append(name)
    return added


def given_settings(args: argparse.Namespace, run: Callable, own: Collection[str] = ()) -> Dict[str, Any]:
    """The settings of the step whose ``run()`` this is that the flags gave (a flag left out is
    left out, as in a config), but the command's ``own``."""
    return {name: getattr(args, name) for name in settings(run) if name not in own and hasattr(args, name)}


def value_arguments(annotation: Any) -> Dict[str, Any]:
    """``add_argument``'s ``type`` (and ``nargs``, ``const``) for a setting of this type."""
    kinds = [a for a in get_args(annotation) if a is not type(None)] if get_origin(annotation) is Union else [annotation]
    if len(kinds) == 1 and get_origin(kinds[0]) in (list, List):
        item = get_args(kinds[0])[0]
        return {"nargs": "+", "type": value_reader(item)}
    if bool in kinds:
        return {"nargs": "?", "const": True, "type": value_reader(annotation)}
    return {"type": value_reader(annotation)}


def value_reader(annotation: Any) -> Callable[[str], Any]:
    def read(text: str) -> Any:
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        for candidate in [value, text, *([{"type": text}] if registrable(annotation) else [])]:
            if fits(candidate, annotation):
                return candidate
        raise argparse.ArgumentTypeError(f"{text!r} is not {described(annotation)}")

    read.__name__ = described(annotation)  # what argparse names in its own messages
    return read


def fits(value: Any, annotation: Any) -> bool:
    """Whether a JSON value is one a setting of this type takes (a registrable's or a ``Lazy``'s:
    a JSON object, checked when the step is built)."""
    origin = get_origin(annotation)
    if annotation is Any:
        return True
    if origin is Union:
        return any(fits(value, a) for a in get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation in (bool, str):
        return isinstance(value, annotation)
    if annotation in (int, float):
        return isinstance(value, (int, float) if annotation is float else int) and not isinstance(value, bool)
    if origin in (list, List):
        return isinstance(value, list) and all(fits(item, get_args(annotation)[0]) for item in value)
    return isinstance(value, dict)


def registrable(annotation: Any) -> bool:
    """Whether a setting takes a registrable's config, which a registered name alone may give."""
    if get_origin(annotation) is Union:
        return any(registrable(a) for a in get_args(annotation))
    return get_origin(annotation) is Lazy or (inspect.isclass(annotation) and issubclass(annotation, Registrable))


def described(annotation: Any) -> str:
    """A setting's type in words, for an error."""
    if get_origin(annotation) is Union:
        return " or ".join(described(a) for a in get_args(annotation))
    names = {type(None): "null", bool: "true/false", int: "an integer", float: "a number", str: "a string"}
    if annotation in names:
        return names[annotation]
    if registrable(annotation):
        return "a registered name or a JSON object"
    return "a JSON list" if get_origin(annotation) in (list, List) else "a JSON object"
