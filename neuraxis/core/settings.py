"""Loading settings: command-line overrides, then NEURAXIS_* environment
variables, then a TOML file, then the defaults (highest priority first).

Each service declares its own pydantic-settings class (cortex/config.py,
neuron/config.py); this module only knows how to fill one in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    TomlConfigSettingsSource,
)

S = TypeVar("S", bound=BaseSettings)


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
