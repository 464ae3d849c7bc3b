"""The Hugging Face hub's side of the tests, without the hub: a cache laid
out on disk as huggingface_hub lays it out (`models--org--name/snapshots/
<commit>/...` and `refs/<revision>` holding the commit), and `neuraxis` run
in a process of its own with the hub's environment variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def lay_out_snapshot(
    cache: Path, repo_id: str, revisions: tuple[str, ...] = ("main",), commit: str = COMMIT
) -> Path:
    """`repo_id`'s snapshot at `commit` with a config.json, each revision
    pointing at it; its directory."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "llama"}')
    (repo / "refs").mkdir()
    for revision in revisions:
        (repo / "refs" / revision).write_text(commit)
    return snapshot


def neuraxis(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """`neuraxis ARGS` with `env` and none of the caller's HF_* settings:
    huggingface_hub reads HF_HOME, HF_HUB_OFFLINE and HF_ENDPOINT once, when
    it is imported, so each case needs a process of its own."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    return subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        timeout=120,
    )
