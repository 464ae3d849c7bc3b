"""`neuraxis head`: the Ray head as a service of its own; the service itself
is neuraxis/head.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from axon.settings import load_settings
from neuraxis.head import HeadSettings
from neuraxis.options import add_settings_options, overrides


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "head",
        help="run the Ray head (the cluster's control state) as a service of its own",
        description="Run the Ray head with token authentication and fixed ports, until "
        "SIGTERM or Ctrl-C. cortex joins it as a client (ray_address) and never stops it.",
    )
    parser.add_argument("--config", type=Path, help="TOML settings file (head.toml)")
    add_settings_options(parser, HeadSettings)
    return parser


def run(args: argparse.Namespace) -> int:
    from neuraxis.head import run_head

    return run_head(load_settings(HeadSettings, args.config, overrides(args, HeadSettings)))
