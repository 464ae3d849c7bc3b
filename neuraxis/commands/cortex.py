"""`neuraxis cortex`: run the gateway. Its options are generated from
CortexSettings (neuraxis/options.py): a new setting needs no edit here."""

from __future__ import annotations

import argparse
from pathlib import Path

from axon.settings import load_settings
from cortex.config import CortexSettings
from neuraxis.options import add_settings_options, overrides


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "cortex", help="run the gateway", description="Run cortex, the OpenAI-compatible gateway."
    )
    parser.add_argument("--config", type=Path, help="TOML settings file")
    add_settings_options(parser, CortexSettings)
    return parser


def run(args: argparse.Namespace) -> int:
    from cortex.main import run as run_cortex

    # Its options over NEURAXIS_CORTEX_* over --config's TOML.
    return run_cortex(load_settings(CortexSettings, args.config, overrides(args, CortexSettings)))
