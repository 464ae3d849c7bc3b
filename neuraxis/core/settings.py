"""Loading settings: command-line overrides, then NEURAXIS_* environment
variables, then a TOML file, then the defaults (highest priority first).

Each service declares its own pydantic-settings class (cortex/config.py,
neuraxis/core/neuron_settings.py); this module only knows how to fill one in.
The command-line options are generated from those classes
(neuraxis/app/options.py): a field's name, type, default and description make
its option, and `Flag` below marks the few whose option is spelled otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    TomlConfigSettingsSource,
)

S = TypeVar("S", bound=BaseSettings)


@dataclass(frozen=True)
class Flag:
    """A setting's command-line spelling where it is not `--field-name`:
    `neurons: Annotated[list[str], Flag("neuron", metavar="HOST:PORT")]`.
    Flags are a contract with scripts and units, older than some fields."""

    # The option's name without the dashes; None: from the field's name.
    name: str | None = None
    # How the value is shown in --help (default: the name in capitals).
    metavar: str | None = None


class SettingsError(Exception):
    """The configuration is invalid; the message names the setting and why."""


def load_settings(cls: type[S], toml_path: Path | None, overrides: dict[str, Any]) -> S:
    if toml_path is not None and not toml_path.is_file():
        raise SettingsError(f"config file {toml_path} does not exist")
    given = {k: v for k, v in overrides.items() if v is not None}

    class _WithToml(cls):  # type: ignore[valid-type,misc]
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings)
            if toml_path is not None:
                sources += (TomlConfigSettingsSource(settings_cls, toml_file=toml_path),)
            return sources

    _WithToml.__name__ = cls.__name__
    try:
        return _WithToml(**given)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(file)'}: {err['msg']}"
            for err in e.errors()
        )
        where = f" in {toml_path}" if toml_path else ""
        raise SettingsError(f"invalid configuration{where}: {problems}") from None
