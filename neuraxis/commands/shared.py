"""What the command modules share: a command made of subcommands (`neuraxis
cluster stop`), the options of a command that runs a service from a settings
class or talks to a running cluster, and the one way a command says it
failed. The commands themselves are the other modules of this package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar

from pydantic_settings import BaseSettings

from axon.settings import load_settings
from neuraxis.options import add_settings_options, overrides

if TYPE_CHECKING:
    from cortex.config import CortexSettings

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Settings = TypeVar("Settings", bound=BaseSettings)


class Help(NamedTuple):
    """A command's line in its parent's list, and the paragraph of its own
    --help (the line again when there is no more to say)."""

    line: str
    description: str | None = None


def add_command(sub: Subparsers, name: str, text: Help, **kwargs: Any) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=text.line, description=text.description or text.line, **kwargs)


def add_group(
    sub: Subparsers, name: str, text: Help, commands: dict[str, Help], **kwargs: Any
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """A command that only holds subcommands, and their parsers by name; the
    one given lands in `args.<name>_command`."""
    group = add_command(sub, name, text, **kwargs)
    group_sub = group.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND")
    return group, {command: add_command(group_sub, command, h) for command, h in commands.items()}


def add_service_options(
    parser: argparse.ArgumentParser,
    cls: type[BaseSettings],
    config_help: str = "TOML settings file",
    fields: Iterable[str] | None = None,
) -> None:
    """--config and an option for each of `cls`'s settings (or the named
    ones), for `service_settings` to read back."""
    parser.add_argument("--config", type=Path, help=config_help)
    add_settings_options(parser, cls, fields)


def service_settings(args: argparse.Namespace, cls: type[Settings]) -> Settings:
    """The options given over the NEURAXIS_* environment over --config's TOML
    over the defaults."""
    return load_settings(cls, args.config, overrides(args, cls))


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """--address and --config, for `cluster_of`."""
    parser.add_argument("--address", help="the Ray head's host:port (default: from --config)")
    parser.add_argument("--config", type=Path, help="cortex's TOML settings file")


def cluster_of(args: argparse.Namespace) -> str:
    """The Ray head that --address or --config names (neuraxis/cluster_address.py)."""
    # Imported here: it reads cortex's settings, and `python -m neuraxis.doctor`
    # imports this module on hosts without cortex.
    from neuraxis.cluster_address import NO_ADDRESS, cluster_address

    address = cluster_address(args.address, args.config)
    if not address:
        raise UsageError(NO_ADDRESS)
    return address


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """--config, --state-dir and --postgres-dsn: the store cortex uses, for
    `store_settings` (keys, tenants, usage)."""
    parser.add_argument("--config", type=Path, help="cortex's TOML settings file")
    parser.add_argument("--state-dir", type=Path, help="cortex's state directory")
    parser.add_argument("--postgres-dsn", help="cortex's PostgreSQL store")


def add_store_commands(commands: dict[str, argparse.ArgumentParser]) -> None:
    """What the store's command groups (keys, tenants) share: `list --json`,
    and the store's options on every command of the group."""
    commands["list"].add_argument("--json", action="store_true", help="print JSON")
    for command in commands.values():
        add_store_options(command)


def store_settings(args: argparse.Namespace) -> CortexSettings:
    """cortex's settings as `add_store_options`' options give them (over
    the environment and --config's TOML)."""
    # Imported here: `python -m neuraxis.doctor` imports this module on
    # hosts without cortex.
    from cortex.config import CortexSettings

    given = {
        name: value
        for name, value in (("state_dir", args.state_dir), ("postgres_dsn", args.postgres_dsn))
        if value is not None
    }
    return load_settings(CortexSettings, args.config, given)


class UsageError(Exception):
    """What a command cannot run with; `neuraxis` says it and exits with 2,
    as for a bad option."""


def fail(problem: object, code: int = 1) -> int:
    """Say why the command failed, as every command does; returns its exit
    status."""
    print(f"neuraxis: {problem}", file=sys.stderr)
    return code
