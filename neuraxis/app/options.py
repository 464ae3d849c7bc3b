"""Command-line options generated from a pydantic settings class (or any
pydantic model: `neuraxis up`'s EmbeddedOptions).

Every field becomes `--field-name` (or the `Flag` name it is annotated with,
neuraxis/core/settings.py): its type gives the option's form, its description
and default the help. Options default to None, so an option not given leaves
the setting to the environment, the TOML file or the field's default
(`load_settings`); `overrides` reads back the ones that were given.

    bool                    --x / --no-x
    Literal, Enum, unions   choices (an enum's values)
    int, float, str, Path   one value of that type
    SecretStr               a string (kept out of the help's default)
    list[T]                 repeated: --x A --x B
    dict, a pydantic model  JSON, as in the environment: --x '{"a": 1}'
    T | None                as T

A field of another type is refused when the parser is built, not when a user
first passes it. The subcommands themselves live in neuraxis/app/cli.py.
"""

from __future__ import annotations

import argparse
import json
import types
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from neuraxis.core.settings import Flag

_SCALARS: tuple[type, ...] = (int, float, str, Path)


def add_settings_options(
    parser: argparse.ArgumentParser,
    cls: type[BaseModel],
    fields: Iterable[str] | None = None,
) -> None:
    """Add an option for each of `cls`'s fields (or only the named ones)."""
    names = list(cls.model_fields) if fields is None else list(fields)
    unknown = [n for n in names if n not in cls.model_fields]
    if unknown:
        raise ValueError(f"{cls.__name__} has no setting {', '.join(unknown)}")
    for name in names:
        field = cls.model_fields[name]
        flag = _flag(field)
        option = "--" + (flag.name or name).replace("_", "-")
        kwargs = _form(name, field.annotation)
        if flag.metavar is not None:
            kwargs["metavar"] = flag.metavar
        parser.add_argument(option, dest=name, default=None, help=_help(field), **kwargs)


def overrides(args: argparse.Namespace, cls: type[BaseModel]) -> dict[str, Any]:
    """The settings given on the command line, for `load_settings`."""
    given = {name: getattr(args, name, None) for name in cls.model_fields}
    return {name: value for name, value in given.items() if value is not None}


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
