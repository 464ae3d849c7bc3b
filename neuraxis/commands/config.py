"""`neuraxis config check`: the checks themselves are neuraxis/configcheck.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neuraxis.commands.shared import Help, Subparsers, UsageError, add_group

CHECK = Help(
    "check configuration files",
    "Parse configuration files as the services would and report problems.",
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help("configuration files", "Config commands.")
    config, commands = add_group(sub, "config", text, {"check": CHECK})
    check = commands["check"]
    check.add_argument("--cortex", type=Path, help="cortex.toml")
    check.add_argument("--neuron", type=Path, help="neuron.toml")
    check.add_argument("--deployment", type=Path, help="the deployment spec")
    check.add_argument("--head", type=Path, help="head.toml")
    return config


def run(args: argparse.Namespace) -> int:
    from neuraxis.configcheck import check

    if not (args.cortex or args.neuron or args.deployment or args.head):
        raise UsageError("name a file: --cortex, --neuron, --deployment or --head")
    lines = check(args.cortex, args.neuron, args.deployment, args.head)
    for line in lines:
        print(line, file=sys.stderr if line.startswith("error") else sys.stdout)
    return 1 if any(line.startswith("error") for line in lines) else 0
