"""Models from the Hugging Face hub, without the hub: a repo's snapshot found
in a cache laid out as huggingface_hub lays it out, or refused with the repo,
the revision, the cache and the command that fetches it; and what a neuron
in offline mode does with a repo id at start (`--print-engine-args` resolves
the model as `serve` does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron.models.hub import HubError, locate
from neuron.models.source import HubModel
from tests.unit.neuron.hub_env import COMMIT, lay_out_snapshot, neuraxis


def test_a_repo_not_in_the_cache_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(HubError) as refused:
        locate(HubModel("Qwen/Qwen3-0.6B", "v1.2"), tmp_path)
    assert str(refused.value) == (
        f"Qwen/Qwen3-0.6B (revision v1.2) is not (or not wholly) in the model cache {tmp_path}, "
        "and offline mode is on (HF_HUB_OFFLINE=1): fetch it first with "
        f"`neuraxis model pull Qwen/Qwen3-0.6B --revision v1.2 --cache-dir {tmp_path}` "
        "as the neuron's user, or unset HF_HUB_OFFLINE"
    )


def test_a_cached_snapshot_is_found_by_its_revision_or_commit(tmp_path: Path) -> None:
    snapshot = lay_out_snapshot(tmp_path, "Qwen/Qwen3-0.6B", ("main", "v1.2"))
    assert locate(HubModel("Qwen/Qwen3-0.6B", "v1.2"), tmp_path) == snapshot
    assert locate(HubModel("Qwen/Qwen3-0.6B", COMMIT), tmp_path) == snapshot
    assert locate(HubModel("Qwen/Qwen3-0.6B"), tmp_path) == snapshot  # main
    with pytest.raises(HubError, match="revision v2"):
        locate(HubModel("Qwen/Qwen3-0.6B", "v2"), tmp_path)
    with pytest.raises(HubError, match="Qwen/Other"):
        locate(HubModel("Qwen/Other"), tmp_path)


SERVE = ["neuron", "serve", "--generation=cpu", "--print-engine-args"]


def test_offline_a_neuron_refuses_a_repo_missing_from_the_cache(tmp_path: Path) -> None:
    done = neuraxis(
        [*SERVE, "--model=Qwen/Qwen3-0.6B", "--revision=v1.2"],
        HF_HOME=str(tmp_path),
        HF_HUB_OFFLINE="1",
    )
    assert done.returncode == 1
    assert done.stdout == ""
    cache = tmp_path / "hub"
    assert done.stderr == (
        f"neuron: Qwen/Qwen3-0.6B (revision v1.2) is not (or not wholly) in the model cache "
        f"{cache}, and offline mode is on (HF_HUB_OFFLINE=1): fetch it first with "
        f"`neuraxis model pull Qwen/Qwen3-0.6B --revision v1.2 --cache-dir {cache}` "
        "as the neuron's user, or unset HF_HUB_OFFLINE\n"
    )


def test_offline_a_cached_repo_goes_to_vllm_with_its_revision(tmp_path: Path) -> None:
    lay_out_snapshot(tmp_path / "hub", "Qwen/Qwen3-0.6B", ("v1.2",))
    done = neuraxis(
        [*SERVE, "--model=Qwen/Qwen3-0.6B", "--revision=v1.2"],
        HF_HOME=str(tmp_path),
        HF_HUB_OFFLINE="1",
    )
    assert done.returncode == 0, done.stderr
    args = json.loads(done.stdout)["engine_args"]
    assert (args["model"], args["served_model_name"]) == ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B")
    assert (args["revision"], args["tokenizer_revision"]) == ("v1.2", "v1.2")


def test_a_revision_pins_only_a_repo_id(tmp_path: Path) -> None:
    done = neuraxis([*SERVE, f"--cache-dir={tmp_path}", "--revision=v1"])
    assert done.returncode == 1
    assert done.stderr == (
        "neuron: revision 'v1' pins a Hugging Face repo id, and 'smollm2-135m-instruct' is none\n"
    )
