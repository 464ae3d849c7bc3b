"""What a model's source names by its spelling: a bundled id, a directory, or
a Hugging Face repo id (the hub's own rule for its owner and name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron.models.bundled import BUNDLED_MODELS
from neuron.models.source import SourceKind, is_repo_id, source_kind


@pytest.mark.parametrize(
    "repo_id", ["Qwen/Qwen3-0.6B", "HuggingFaceTB/SmolLM2-135M-Instruct", "a/b", "org_1/x.y-z"]
)
def test_repo_ids(repo_id: str) -> None:
    assert is_repo_id(repo_id)


@pytest.mark.parametrize(
    "text",
    [
        "gpt2",  # a bare name: the hub's legacy alias, too close to a bundled id
        "org/name/more",
        "org/",
        "/name",
        "-org/name",
        "org/name.",
        "org--x/name",
        "org/na..me",
        "org/na me",
        "org/" + "n" * 97,
    ],
)
def test_not_repo_ids(text: str) -> None:
    assert not is_repo_id(text)


def test_the_kinds_by_spelling(tmp_path: Path) -> None:
    assert source_kind("smollm2-135m-instruct", BUNDLED_MODELS) is SourceKind.BUNDLED
    assert source_kind("/var/lib/neuraxis/models/qwen", BUNDLED_MODELS) is SourceKind.DIRECTORY
    assert source_kind("~/models/qwen", BUNDLED_MODELS) is SourceKind.DIRECTORY
    assert source_kind(str(tmp_path), BUNDLED_MODELS) is SourceKind.DIRECTORY
    assert source_kind("Qwen/Qwen3-0.6B", BUNDLED_MODELS) is SourceKind.REPO
    assert source_kind("qwen", BUNDLED_MODELS) is None
