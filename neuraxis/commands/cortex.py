"""`neuraxis cortex`: run the gateway. Its options are generated from
CortexSettings (neuraxis/options.py): a new setting needs no edit here."""

from __future__ import annotations

import argparse

from cortex.config import CortexSettings
from neuraxis.commands.shared import (
    Help,
    Subparsers,
    add_command,
    add_service_options,
    service_settings,
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help("run the gateway", "Run cortex, the OpenAI-compatible gateway.")
    parser = add_command(sub, "cortex", text)
    add_service_options(parser, CortexSettings)
    return parser


def run(args: argparse.Namespace) -> int:
    from cortex.main import run as run_cortex

    return run_cortex(service_settings(args, CortexSettings))
