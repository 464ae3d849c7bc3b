"""Options generated from settings classes: every field gets one, of the
right form, with its help; a group of settings gets an argument group; a new
field needs no other edit."""

from __future__ import annotations

import argparse
from enum import Enum
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import pytest
from pydantic import BaseModel, Field, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from axon.generations import Generation
from axon.neuron_settings import NeuronSettings
from axon.settings import Flag, SettingsGroup, group_of, load_settings
from axon.tasks import ModelTask
from cortex.config import CortexSettings
from neuraxis.embedded import EmbeddedOptions
from neuraxis.options import add_settings_options, option_choices, overrides


class Colour(Enum):
    RED = "red"
    BLUE = "blue"


class Tls(BaseModel):
    cert: Path
    key: Path


class ToySettings(BaseSettings):
    """A settings class as a developer would add one: no other edit."""

    model_config = SettingsConfigDict(env_prefix="NEURAXIS_TOY_", extra="forbid")

    count: int = Field(3, description="how many")
    ratio: float | None = Field(None, description="a ratio")
    name: str = Field("toy", description="its name")
    where: Path | None = Field(None, description="a directory")
    loud: bool = Field(False, description="shout")
    quiet: Annotated[bool, Flag("hush")] = Field(True, description="whisper")
    mode: Literal["fast", "slow"] = Field("fast", description="speed")
    colour: Colour | None = Field(None, description="a colour")
    peers: Annotated[list[str], Flag("peer", metavar="HOST:PORT")] = Field(
        default_factory=list, description="a peer (repeatable)"
    )
    sizes: list[int] = Field(default_factory=list, description="sizes")
    percent: int = Field(50, description="a share in %")
    token: SecretStr | None = Field(None, description="a secret")
    limits: dict[str, int] = Field(default_factory=dict, description="per-key limits")
    tls: Tls | None = Field(None, description="TLS files")


class Spin(SettingsGroup):
    """How the toy spins."""

    speed: int = Field(1, description="turns a second")
    clockwise: bool = Field(True, description="which way")


class GroupedToy(BaseSettings):
    """A settings class with a group, and a setting that moved into it."""

    model_config = SettingsConfigDict(
        env_prefix="NEURAXIS_GROUPED_", env_nested_delimiter="__", extra="forbid"
    )
    former_names: ClassVar[dict[str, str]] = {"spin_speed_rpm": "spin.speed"}

    name: str = Field("toy", description="its name")
    spin: Spin = Field(default_factory=Spin, description="spinning")


class Clock:
    """Not a type a command line (or an environment variable) can give."""


def _parser(cls: type[BaseModel], fields: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    add_settings_options(parser, cls, fields)
    return parser


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest != "help"}


def _settings(cls: type[BaseModel]) -> dict[str, FieldInfo]:
    """Every setting of `cls` by its option's dest: a group's as group.field."""
    found: dict[str, FieldInfo] = {}
    for name, field in cls.model_fields.items():
        group = group_of(field)
        if group is None:
            found[name] = field
        else:
            found |= {f"{name}.{sub}": f for sub, f in group.model_fields.items()}
    return found


@pytest.mark.parametrize(
    "cls", [CortexSettings, NeuronSettings, EmbeddedOptions, ToySettings, GroupedToy]
)
def test_every_field_has_an_option(cls: type[BaseModel]) -> None:
    assert set(_actions(_parser(cls))) == set(_settings(cls))


@pytest.mark.parametrize("cls", [CortexSettings, NeuronSettings, EmbeddedOptions])
def test_every_setting_says_what_it_is(cls: type[BaseModel]) -> None:
    """The description is the option's help: a setting without one would be
    an option without a word of help."""
    missing = [name for name, field in _settings(cls).items() if not field.description]
    assert missing == []


def test_a_group_is_an_argument_group_with_its_docstring() -> None:
    parser = _parser(GroupedToy)
    (group,) = [g for g in parser._action_groups if g.title == "[spin]"]
    assert group.description == "How the toy spins."
    assert [a.option_strings[0] for a in group._group_actions] == [
        "--spin-speed",
        "--spin-speed-rpm",
        "--spin-clockwise",
    ]
    text = parser.format_help()
    assert "--spin-speed SPIN_SPEED" in text and "turns a second (default: 1)" in text
    assert "--spin-speed-rpm" not in text  # the old spelling works, unadvertised


def test_a_groups_options_come_back_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    args = _parser(GroupedToy).parse_args(["--spin-speed=3", "--no-spin-clockwise"])
    assert overrides(args, GroupedToy) == {"spin": {"speed": 3, "clockwise": False}}
    old = _parser(GroupedToy).parse_args(["--spin-speed-rpm=4"])
    assert overrides(old, GroupedToy) == {"spin": {"speed": 4}}
    assert overrides(_parser(GroupedToy).parse_args([]), GroupedToy) == {}
    monkeypatch.setenv("NEURAXIS_GROUPED_SPIN__CLOCKWISE", "false")
    settings = load_settings(GroupedToy, None, overrides(old, GroupedToy))
    assert settings.spin == Spin(speed=4, clockwise=False)


def test_a_new_settings_class_parses_into_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURAXIS_TOY_NAME", "from-env")
    argv = [
        "--count=7",
        "--ratio=0.5",
        "--where=/tmp/x",
        "--loud",
        "--no-hush",
        "--mode=slow",
        "--colour=blue",
        "--peer=a:1",
        "--peer=b:2",
        "--sizes=1",
        "--sizes=2",
        "--token=s3cret",
        '--limits={"a": 1}',
        '--tls={"cert": "/c.pem", "key": "/k.pem"}',
    ]
    args = _parser(ToySettings).parse_args(argv)
    settings = load_settings(ToySettings, None, overrides(args, ToySettings))
    assert settings.model_dump() == dict(
        count=7,
        ratio=0.5,
        name="from-env",
        where=Path("/tmp/x"),
        loud=True,
        quiet=False,
        mode="slow",
        colour=Colour.BLUE,
        peers=["a:1", "b:2"],
        sizes=[1, 2],
        percent=50,
        token=SecretStr("s3cret"),
        limits={"a": 1},
        tls={"cert": Path("/c.pem"), "key": Path("/k.pem")},
    )


def test_options_not_given_override_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every option defaults to None, so the environment, the file and the
    field's default still count."""
    monkeypatch.setenv("NEURAXIS_TOY_COUNT", "9")
    args = _parser(ToySettings).parse_args([])
    assert overrides(args, ToySettings) == {}
    assert load_settings(ToySettings, None, overrides(args, ToySettings)).count == 9
    given = _parser(ToySettings).parse_args(["--count", "4"])
    assert load_settings(ToySettings, None, overrides(given, ToySettings)).count == 4


def test_forms_follow_the_types() -> None:
    actions = _actions(_parser(ToySettings))
    assert actions["count"].type is int
    assert actions["ratio"].type is float
    assert actions["where"].type is Path
    assert isinstance(actions["loud"], argparse.BooleanOptionalAction)
    assert actions["quiet"].option_strings == ["--hush", "--no-hush"]
    assert actions["mode"].choices == ["fast", "slow"]
    assert actions["colour"].choices == ["red", "blue"]
    assert actions["peers"].option_strings == ["--peer"]
    assert actions["peers"].metavar == "HOST:PORT"
    assert isinstance(actions["sizes"], argparse._AppendAction)
    assert actions["sizes"].type is int
    assert actions["token"].type is str
    assert (actions["limits"].metavar, actions["tls"].metavar) == ("JSON", "JSON")


def test_help_is_the_description_and_the_default() -> None:
    parser = _parser(ToySettings)
    actions = _actions(parser)
    assert actions["count"].help == "how many (default: 3)"
    assert actions["loud"].help == "shout (default: off)"
    assert actions["ratio"].help == "a ratio"
    assert actions["peers"].help == "a peer (repeatable)"
    text = parser.format_help()
    assert "a share in % (default: 50)" in text  # a literal % survives argparse
    assert "speed (default: fast)" in text


def test_generation_choices_come_from_the_enum() -> None:
    actions = _actions(_parser(NeuronSettings))
    names = [g.value for g in Generation]
    assert actions["generation"].choices == ["auto", *names]
    assert actions["sim_generation"].choices == names
    assert actions["task"].choices == [t.value for t in ModelTask]
    assert option_choices(Generation | None) == names


def test_a_type_with_no_command_line_form_is_refused_when_building() -> None:
    class Odd(BaseSettings):
        model_config = SettingsConfigDict(arbitrary_types_allowed=True)
        clock: Clock = Field(default_factory=Clock, description="a clock")

    with pytest.raises(TypeError, match="setting clock: no command-line form"):
        _parser(Odd)


def test_only_the_named_fields_and_only_real_ones() -> None:
    assert set(_actions(_parser(ToySettings, ["count", "loud"]))) == {"count", "loud"}
    with pytest.raises(ValueError, match="ToySettings has no setting colour_depth"):
        _parser(ToySettings, ["count", "colour_depth"])
