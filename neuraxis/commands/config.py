"""`neuraxis config check`: the checks themselves are neuraxis/configcheck.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    config = sub.add_parser("config", help="configuration files", description="Config commands.")
    config_sub = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    check = config_sub.add_parser(
        "check",
        help="check configuration files",
        description="Parse configuration files as the services would and report problems.",
    )
    check.add_argument("--cortex", type=Path, help="cortex.toml")
    check.add_argument("--neuron", type=Path, help="neuron.toml")
    check.add_argument("--deployment", type=Path, help="the deployment spec")
    check.add_argument("--head", type=Path, help="head.toml")
    return config


def run(args: argparse.Namespace) -> int:
    from neuraxis.configcheck import check

    if not (args.cortex or args.neuron or args.deployment or args.head):
        print("neuraxis: name a file: --cortex, --neuron, --deployment or --head", file=sys.stderr)
        return 2
    lines = check(args.cortex, args.neuron, args.deployment, args.head)
    for line in lines:
        print(line, file=sys.stderr if line.startswith("error") else sys.stdout)
    return 1 if any(line.startswith("error") for line in lines) else 0
