"""The `neuraxis` command: the registration of its commands and `main`.

Each command is one module of neuraxis/commands/ with `add_parser` and
`run`: up, cortex, head, neuron serve|agent, status, cluster stop|apply,
config check, model prepare, tls init, keys create|list|revoke, tenants
set|list|show, usage, node cordon|drain|uncordon, adapters add|remove|list,
doctor. The options of `cortex`, `neuron serve`, `neuron
agent`, `head` and `up` are generated from their settings classes
(neuraxis/options.py): a new setting needs no edit here nor there."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from axon.settings import SettingsError
from cortex.cluster.spec import SpecError
from neuraxis.commands import (
    adapters,
    cluster,
    config,
    cortex,
    doctor,
    head,
    keys,
    model,
    neuron,
    node,
    status,
    tenants,
    tls,
    up,
    usage,
)
from neuraxis.commands.shared import UsageError, fail

# In the order `neuraxis --help` lists them.
COMMANDS = (
    up,
    cortex,
    head,
    neuron,
    status,
    cluster,
    config,
    model,
    tls,
    keys,
    tenants,
    usage,
    node,
    adapters,
    doctor,
)


def _version() -> str:
    try:
        return version("neuraxis")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuraxis", description="neuraxis: a distributed LLM serving cluster."
    )
    parser.add_argument("--version", action="version", version=f"neuraxis {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except (SettingsError, SpecError, UsageError) as e:
        return fail(e, 2)
    return code


if __name__ == "__main__":
    sys.exit(main())
