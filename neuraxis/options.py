"""Command-line options generated from a pydantic settings class (or any
pydantic model: `neuraxis up`'s EmbeddedOptions).

Every field becomes `--field-name` (or the `Flag` name it is annotated with,
axon/settings.py): its type gives the option's form, its description
and default the help. A `SettingsGroup` field becomes an argument group (as
vLLM's engine arguments are) titled `[group]`, the group class's docstring
its description, each of its fields `--group-field-name`; a spelling from
before the group (the class's `former_names`) is accepted too, left out of
the help. Options default to None, so an option not given leaves the
setting to the environment, the TOML file or the field's default
(`load_settings`); `overrides` reads back the ones that were given, nested
as the groups are.

    bool                    --x / --no-x
    Literal, Enum, unions   choices (an enum's values)
    int, float, str, Path   one value of that type
    SecretStr               a string (kept out of the help's default)
    list[T]                 repeated: --x A --x B
    dict, a pydantic model  JSON, as in the environment: --x '{"a": 1}'
    T | None                as T

A field of another type is refused when the parser is built, not when a user
first passes it. The commands themselves live in neuraxis/commands/.
"""

from __future__ import annotations

import argparse
import inspect
import json
import types
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from axon.settings import Flag, former_names, group_of

_SCALARS: tuple[type, ...] = (int, float, str, Path)


def add_settings_options(
    parser: argparse.ArgumentParser,
    cls: type[BaseModel],
    fields: Iterable[str] | None = None,
) -> None:
    """Add an option for each of `cls`'s fields (or only the named ones; a
    group's name adds the whole group)."""
    names = list(cls.model_fields) if fields is None else list(fields)
    unknown = [n for n in names if n not in cls.model_fields]
    if unknown:
        raise ValueError(f"{cls.__name__} has no setting {', '.join(unknown)}")
    former: dict[str, list[str]] = {}
    for old, new in former_names(cls).items():
        former.setdefault(new, []).append(old)
    for name in names:
        field = cls.model_fields[name]
        group = group_of(field)
        if group is None:
            _add(parser, name, field, _flag(field).name or name)
            continue
        section = parser.add_argument_group(f"[{name}]", inspect.cleandoc(group.__doc__ or ""))
        for sub, sub_field in group.model_fields.items():
            dest = f"{name}.{sub}"
            option = _add(section, dest, sub_field, _flag(sub_field).name or f"{name}_{sub}")
            for old in former.get(dest, []):
                if _option(old) != option:
                    _add(section, dest, sub_field, old, hidden=True)


def overrides(args: argparse.Namespace, cls: type[BaseModel]) -> dict[str, Any]:
    """The settings given on the command line, for `load_settings`."""
    given: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        group = group_of(field)
        if group is None:
            given[name] = getattr(args, name, None)
            continue
        values = {sub: getattr(args, f"{name}.{sub}", None) for sub in group.model_fields}
        given[name] = {sub: value for sub, value in values.items() if value is not None} or None
    return {name: value for name, value in given.items() if value is not None}


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    dest: str,
    field: FieldInfo,
    name: str,
    hidden: bool = False,
) -> str:
    """Add one field's option under `name`; returns the option."""
    option = _option(name)
    kwargs = _form(dest, field.annotation)
    metavar = _flag(field).metavar
    if metavar is not None:
        kwargs["metavar"] = metavar
    elif "." in dest and kwargs.keys().isdisjoint({"metavar", "choices", "action"}):
        kwargs["metavar"] = name.upper()  # not ADMISSION.QUEUE_SIZE, the dest
    shown = argparse.SUPPRESS if hidden else _help(field)
    parser.add_argument(option, dest=dest, default=None, help=shown, **kwargs)
    return option


def option_choices(annotation: Any) -> list[Any] | None:
    """The values a Literal, an Enum or a union of them allows; None for any
    other type."""
    members = _members(annotation)
    choices: list[Any] = []
    for member in members:
        if get_origin(member) is Literal:
            choices += get_args(member)
        elif isinstance(member, type) and issubclass(member, Enum):
            choices += [item.value for item in member]
        else:
            return None
    return choices


def _flag(field: FieldInfo) -> Flag:
    return next((m for m in field.metadata if isinstance(m, Flag)), Flag())


def _members(annotation: Any) -> list[Any]:
    """The types a union allows, without None (`int | None` is `int` here)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def _form(name: str, annotation: Any) -> dict[str, Any]:
    """argparse's keywords for a field of this type."""
    choices = option_choices(annotation)
    if choices is not None:
        # A Literal's values are all of one type here (str for every setting so far).
        return {"choices": choices, "type": type(choices[0])}
    members = _members(annotation)
    if len(members) == 2 and any(get_origin(m) is Literal for m in members):
        # A number or a word (`--workers 4` or `--workers auto`).
        (number,) = [m for m in members if get_origin(m) is not Literal]
        words = [w for m in members if get_origin(m) is Literal for w in get_args(m)]
        kind = _base(number)
        if kind in (int, float):
            metavar = "|".join([kind.__name__.upper(), *map(str, words)])
            return {"type": _number_or(kind, words, metavar), "metavar": metavar}
    if len(members) == 1:
        (kind,) = members
        if kind is bool:
            return {"action": argparse.BooleanOptionalAction}
        if kind in _SCALARS:
            return {"type": kind}
        if kind is SecretStr:
            return {"type": str}
        if get_origin(kind) is dict or _is_model(kind):
            return {"type": json.loads, "metavar": "JSON"}
        if get_origin(kind) is list:
            (item,) = get_args(kind)
            item_choices = option_choices(item)
            if item_choices is not None:
                return {"action": "append", "choices": item_choices}
            if item in _SCALARS:
                return {"action": "append", "type": item}
    raise TypeError(f"setting {name}: no command-line form for {annotation!r}")


def _number_or(kind: type, words: list[Any], metavar: str) -> Any:
    """argparse's type for a number or one of `words`."""

    def parse(text: str) -> Any:
        if text in words:
            return text
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {metavar}, got {text!r}") from None

    return parse


def _base(kind: Any) -> Any:
    """`Annotated[int, ...]` is int."""
    return get_args(kind)[0] if get_origin(kind) is Annotated else kind


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _help(field: FieldInfo) -> str:
    text = field.description or ""
    default = _shown_default(field)
    if default is not None:
        text = f"{text} (default: {default})" if text else f"default: {default}"
    # argparse formats help with %: a literal one must be doubled.
    return text.replace("%", "%%")


def _shown_default(field: FieldInfo) -> str | None:
    """The default as a user would type it; None where there is nothing to
    show (no default, None, an empty list, a computed one the description
    explains)."""
    value = field.default
    if value is PydanticUndefined or value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, SecretStr | BaseModel | dict):
        return None
    if isinstance(value, Sequence) and not isinstance(value, str) and not value:
        return None
    return str(value)
