"""What a model's `source` may name, told apart by its spelling: a bundled
model id (neuron/models/bundled.py), a model directory, or a Hugging Face
repo id (`org/name`) that vLLM resolves into the host's hub cache
(neuron/models/hub.py); and `HubModel`, a repo id with its pinned revision.

Nothing here reads the network or imports huggingface_hub: `neuraxis config
check` uses these rules on hosts without the engine.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

# The hub's own rule for a repo's owner and name (huggingface_hub's
# validate_repo_id): letters, digits, '_', '-' and '.', neither starting nor
# ending with '-' or '.', at most 96 characters. A bare name (`gpt2`) is a
# legacy alias the hub redirects; asking for `org/name` keeps it apart from
# the bundled ids.
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"{_PART}/{_PART}")

# What the hub serves when no revision is named.
DEFAULT_REVISION = "main"


@dataclass(frozen=True)
class HubModel:
    repo_id: str  # `org/name` (is_repo_id)
    revision: str | None = None  # a branch, tag or commit; None: main

    def pull_command(self, cache_dir: Path) -> str:
        """The command that fetches this model into `cache_dir`."""
        revision = f" --revision {self.revision}" if self.revision else ""
        return f"neuraxis model pull {self.repo_id}{revision} --cache-dir {cache_dir}"

    def __str__(self) -> str:
        return f"{self.repo_id} (revision {self.revision or DEFAULT_REVISION})"


def is_repo_id(source: str) -> bool:
    """Whether `source` is spelt as a Hugging Face repo id, `org/name`."""
    return bool(_REPO_ID.fullmatch(source)) and "--" not in source and ".." not in source


def is_path(source: str) -> bool:
    """Whether `source` is spelt as a path: absolute, under the home directory
    or relative to the current one (`./`, `../`). A spec's directories live on
    the neuron hosts, so the spelling is all that can be checked elsewhere."""
    return source.startswith(("/", "~", "./", "../"))


class SourceKind(Enum):
    BUNDLED = "bundled"
    DIRECTORY = "directory"
    REPO = "repo"


def source_kind(source: str, bundled: Collection[str]) -> SourceKind | None:
    """What `source` names by its spelling, or None: nothing a neuron could
    load. A directory is spelt as a path, or exists here."""
    if source in bundled:
        return SourceKind.BUNDLED
    if is_path(source) or Path(source).is_dir():
        return SourceKind.DIRECTORY
    return SourceKind.REPO if is_repo_id(source) else None


def unknown_source(source: str, bundled: Collection[str]) -> str:
    return (
        f"'{source}' is neither a bundled model ({', '.join(sorted(bundled))}), "
        "a model directory (with a config.json) nor a Hugging Face repo id (org/name)"
    )


def misplaced_revision(source: str, revision: str) -> str:
    return f"revision '{revision}' pins a Hugging Face repo id, and '{source}' is none"
