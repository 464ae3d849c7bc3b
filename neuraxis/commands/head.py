"""`neuraxis head`: the Ray head as a service of its own; the service itself
is neuraxis/head.py."""

from __future__ import annotations

import argparse

from neuraxis.commands.shared import (
    Help,
    Subparsers,
    add_command,
    add_service_options,
    service_settings,
)
from neuraxis.head import HeadSettings

HEAD = Help(
    "run the Ray head (the cluster's control state) as a service of its own",
    "Run the Ray head with token authentication and fixed ports, until SIGTERM or Ctrl-C. "
    "cortex joins it as a client (ray_address) and never stops it.",
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    parser = add_command(sub, "head", HEAD)
    add_service_options(parser, HeadSettings, "TOML settings file (head.toml)")
    return parser


def run(args: argparse.Namespace) -> int:
    from neuraxis.head import run_head

    return run_head(service_settings(args, HeadSettings))
