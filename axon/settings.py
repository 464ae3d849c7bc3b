"""Loading settings: command-line overrides, then NEURAXIS_* environment
variables, then a TOML file, then the defaults (highest priority first).

Each service declares its own pydantic-settings class (cortex/config.py,
axon/neuron_settings.py); this module only knows how to fill one in.
A service's settings may nest a `SettingsGroup` per component (cortex's
`admission`, `caps`, ...), defined beside the code that uses it: a TOML
table `[admission]`, the environment `NEURAXIS_CORTEX_ADMISSION__QUEUE_SIZE`,
the flag `--admission-queue-size`. The command-line options are generated
from those classes (neuraxis/options.py): a field's name, type, default
and description make its option, and `Flag` below marks the few whose option
is spelled otherwise.

Spellings from before a setting moved into a group keep working: a class
lists them in `former_names` (old flat name -> "group.field"); every source
here moves them to where they live now, and `former_spellings` says which
ones a file or the environment still uses (`neuraxis config check`).
"""

from __future__ import annotations

import functools
import json
import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    TomlConfigSettingsSource,
)

S = TypeVar("S", bound=BaseSettings)
G = TypeVar("G", bound="SettingsGroup")


@dataclass(frozen=True)
class Flag:
    """A setting's command-line spelling where it is not `--field-name`:
    `neurons: Annotated[list[str], Flag("neuron", metavar="HOST:PORT")]`.
    Flags are a contract with scripts and units, older than some fields."""

    # The option's name without the dashes; None: from the field's name.
    name: str | None = None
    # How the value is shown in --help (default: the name in capitals).
    metavar: str | None = None


class SettingsGroup(BaseModel):
    """One component's settings, nested in a service's settings class under
    a field of its own. The component builds itself from it directly, so
    its fields, defaults and descriptions are written once, here."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def group(model: type[G], description: str) -> G:
    """A service's field holding one group: the group's own defaults, and
    `description` as the help of its flags' section."""
    field: G = Field(default_factory=model, description=description)
    return field


class SettingsError(Exception):
    """The configuration is invalid; the message names the setting and why."""


def former_names(cls: type[BaseModel]) -> Mapping[str, str]:
    """A settings class's old flat spellings -> "group.field" (none: {})."""
    names: Mapping[str, str] = getattr(cls, "former_names", {})
    return names


def group_of(field: FieldInfo) -> type[SettingsGroup] | None:
    """The group a field nests, or None for a plain setting."""
    kind = field.annotation
    if isinstance(kind, type) and issubclass(kind, SettingsGroup):
        return kind
    return None


def regroup(data: Mapping[str, Any], former: Mapping[str, str]) -> dict[str, Any]:
    """One source's values with the former spellings moved into their
    groups. Within one source the new spelling wins; across sources the
    usual order does (a flat key in the file loses to the new env name)."""
    out = dict(data)
    for old, value in data.items():
        target = _moved(former, old, value)
        if target is None:
            continue
        group, name = target
        del out[old]
        current = out.get(group, {})
        if isinstance(current, BaseModel):
            current = current.model_dump(exclude_unset=True)
        out[group] = {name: value, **current}
    return out


def former_spellings(cls: type[BaseModel], toml_path: Path | None) -> list[str]:
    """A line per old spelling in the file and the environment, naming the
    one preferred now."""
    former = former_names(cls)
    lines: list[str] = []
    if toml_path is not None:
        with toml_path.open("rb") as f:
            table = tomllib.load(f)
        for old, value in table.items():
            if (target := _moved(former, old, value)) is not None:
                group, name = target
                lines.append(f"{toml_path}: `{old}` is now `{name}` in [{group}]")
    for old, (env, text) in _former_env(cls).items():
        if (target := _moved(former, old, _decoded(text))) is not None:
            new = f"{_env_prefix(cls)}{target[0]}__{target[1]}".upper()
            lines.append(f"{env} (environment) is now {new}")
    return lines


def _moved(former: Mapping[str, str], key: str, value: Any) -> tuple[str, str] | None:
    """(group, field) where a key of one source lives now, or None where it
    is not an old spelling (`routing` given as a table is the new one)."""
    target = former.get(key)
    if target is None:
        return None
    group, name = target.split(".")
    if key == group and isinstance(value, Mapping | BaseModel):
        return None
    return group, name


def _former_env(cls: type[BaseModel]) -> dict[str, tuple[str, str]]:
    """old name -> (environment variable, its text), for those set."""
    prefix = _env_prefix(cls).upper()
    environ = {key.upper(): (key, value) for key, value in os.environ.items()}
    found = {old: environ.get(f"{prefix}{old}".upper()) for old in former_names(cls)}
    return {old: given for old, given in found.items() if given is not None}


def _decoded(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _env_prefix(cls: type[BaseModel]) -> str:
    return str(cls.model_config.get("env_prefix", ""))


class _Regrouped(PydanticBaseSettingsSource):
    """Another source (the init keywords, the TOML file) with its former
    spellings moved into their groups."""

    def __init__(self, settings_cls: type[BaseSettings], source: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._source = source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the wrapped source whole

    def __call__(self) -> dict[str, Any]:
        return regroup(self._source(), former_names(self.settings_cls))


class _Env(EnvSettingsSource):
    """The environment, where a group's own name was once a plain setting:
    NEURAXIS_CORTEX_ROUTING=power_of_two is `routing.policy`, not the table."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            return super().decode_complex_value(field_name, field, value)
        except ValueError:
            target = former_names(self.settings_cls).get(field_name, "")
            group, _, name = target.partition(".")
            if group != field_name:
                raise
            return {name: value}


class _FormerEnv(PydanticBaseSettingsSource):
    """The old flat environment names (NEURAXIS_CORTEX_ADMISSION_QUEUE_SIZE),
    below the new ones (NEURAXIS_CORTEX_ADMISSION__QUEUE_SIZE)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        cls = self.settings_cls
        former = former_names(cls)
        found: dict[str, Any] = {}
        for old, (_, text) in _former_env(cls).items():
            target = _moved(former, old, _decoded(text))
            if target is None:
                continue
            group, name = target
            kind = group_of(cls.model_fields[group])
            assert kind is not None, f"{old}: {group} is not a settings group"
            # As the environment source does: JSON for a list or a table.
            complex_ = get_origin(kind.model_fields[name].annotation) in (dict, list)
            found.setdefault(group, {})[name] = json.loads(text) if complex_ else text
        return found


def sources(
    settings_cls: type[BaseSettings],
    init_settings: PydanticBaseSettingsSource,
    toml_path: Path | None = None,
) -> tuple[PydanticBaseSettingsSource, ...]:
    """The sources of a settings class, highest priority first: the given
    values (flags), the environment (new names, then old), the TOML file."""
    found: tuple[PydanticBaseSettingsSource, ...] = (
        _Regrouped(settings_cls, init_settings),
        _Env(settings_cls),
        _FormerEnv(settings_cls),
    )
    if toml_path is not None:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=toml_path)
        found += (_Regrouped(settings_cls, toml),)
    return found


def load_settings(cls: type[S], toml_path: Path | None, overrides: dict[str, Any]) -> S:
    if toml_path is not None and not toml_path.is_file():
        raise SettingsError(f"config file {toml_path} does not exist")
    given = {k: v for k, v in overrides.items() if v is not None}
    reset = _TOML_PATH.set(toml_path)
    try:
        loaded = _with_toml(cls)(**given)
        assert isinstance(loaded, cls)  # a subclass of it
        return loaded
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(file)'}: {err['msg']}"
            for err in e.errors()
        )
        where = f" in {toml_path}" if toml_path else ""
        raise SettingsError(f"invalid configuration{where}: {problems}") from None
    finally:
        _TOML_PATH.reset(reset)


# The file `load_settings` is reading (None outside it).
_TOML_PATH: ContextVar[Path | None] = ContextVar("toml_path", default=None)


class SourcedSettings:
    """A mixin, listed before the settings class it adds to (its hook must
    come before BaseSettings'), for a class whose sources are `sources_of`:
    by default `sources` above, with the TOML file while `load_settings`
    reads one (built in code, in tests or `neuraxis up`, the class takes the
    former spellings too). Not a BaseSettings itself: its default
    model_config would override the service class's."""

    @classmethod
    def sources_of(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return sources(settings_cls, init_settings, _TOML_PATH.get())

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # pydantic-settings' hook; ours pick from the given values only.
        return cls.sources_of(settings_cls, init_settings)


@functools.cache
def _with_toml(cls: type[BaseSettings]) -> type[BaseSettings]:
    """`cls` reading `sources` and the TOML file: a SourcedSettings class
    itself, any other through a subclass, made once (making a pydantic class
    costs ~20 ms)."""
    if issubclass(cls, SourcedSettings):
        return cls

    class _WithToml(SourcedSettings, cls):  # type: ignore[valid-type,misc]
        pass

    _WithToml.__name__ = cls.__name__
    return _WithToml
