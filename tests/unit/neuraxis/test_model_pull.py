"""`neuraxis model pull`: a repo id fetched into the hub cache (from a hub
served on 127.0.0.1, tests/unit/neuron/hub_server.py), or one line saying
why not (the hub unreachable, offline mode, no such repo or revision, not a
repo id), exit 1, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.ports import free_port
from neuraxis.cli import main
from neuron.models.hub import locate
from neuron.models.source import HubModel
from tests.unit.neuron.hub_env import COMMIT, lay_out_snapshot, neuraxis
from tests.unit.neuron.hub_server import LocalHub


def test_an_unreachable_hub_is_one_line_naming_its_settings(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = neuraxis(
        ["model", "pull", "Qwen/Qwen3-0.6B", "--cache-dir", str(tmp_path)], HF_ENDPOINT=endpoint
    )
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"neuraxis: the Hugging Face hub at {endpoint} could not be reached (")
    assert line.endswith(
        "and Qwen/Qwen3-0.6B (revision main) is not (or not wholly) in the model cache "
        f"{tmp_path}: "
        "HF_ENDPOINT sets the hub's address (a mirror), HTTPS_PROXY a proxy, HF_TOKEN the token"
    )


def test_what_the_cache_holds_is_printed_without_the_hub(tmp_path: Path) -> None:
    snapshot = lay_out_snapshot(tmp_path, "Qwen/Qwen3-0.6B", ("v1.2",))
    pull = ["model", "pull", "Qwen/Qwen3-0.6B", "--revision", "v1.2", "--cache-dir", str(tmp_path)]
    done = neuraxis(pull, HF_HUB_OFFLINE="1")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{snapshot}\n", "")


def test_offline_mode_is_named_when_the_cache_lacks_the_repo(tmp_path: Path) -> None:
    done = neuraxis(
        ["model", "pull", "Qwen/Qwen3-0.6B", "--cache-dir", str(tmp_path)], HF_HUB_OFFLINE="1"
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"neuraxis: Qwen/Qwen3-0.6B (revision main) is not in the model cache {tmp_path}, "
        "and offline mode is on (HF_HUB_OFFLINE=1): unset it for the pull\n"
    )


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("qwen", "neuraxis: 'qwen' is not a Hugging Face repo id (org/name)"),
        (
            "smollm2-135m-instruct",
            "neuraxis: smollm2-135m-instruct is a bundled model: "
            "`neuraxis model prepare smollm2-135m-instruct`",
        ),
    ],
)
def test_only_a_repo_id_is_pulled(
    source: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["model", "pull", source, "--cache-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"{said}\n"
    assert list(tmp_path.iterdir()) == []


FILES = {
    "config.json": b'{"model_type": "llama", "hidden_size": 64}',
    "tokenizer_config.json": b'{"model_max_length": 2048}',
    "README.md": b"# a small repo\n",
}


def test_a_repo_is_fetched_from_a_hub_into_the_cache(tmp_path: Path) -> None:
    with LocalHub("Qwen/Qwen3-0.6B", FILES, revisions=("main", "v1.2")) as hub:
        pull = ["model", "pull", "Qwen/Qwen3-0.6B", "--revision", "v1.2"]
        done = neuraxis([*pull, "--cache-dir", str(tmp_path)], HF_ENDPOINT=hub.endpoint)
    assert done.returncode == 0, done.stderr
    snapshot = tmp_path / "models--Qwen--Qwen3-0.6B" / "snapshots" / COMMIT
    assert done.stdout == f"{snapshot}\n"
    assert {p.name: p.read_bytes() for p in snapshot.iterdir()} == FILES
    assert (tmp_path / "models--Qwen--Qwen3-0.6B" / "refs" / "v1.2").read_text() == COMMIT
    assert "GET /api/models/Qwen/Qwen3-0.6B/revision/v1.2" in hub.requests
    # What was pulled is what an offline neuron finds.
    assert locate(HubModel("Qwen/Qwen3-0.6B", "v1.2"), tmp_path) == snapshot


def test_what_the_hub_does_not_have_is_named(tmp_path: Path) -> None:
    with LocalHub("Qwen/Qwen3-0.6B", FILES) as hub:
        cache = ["--cache-dir", str(tmp_path)]
        revision = neuraxis(
            ["model", "pull", "Qwen/Qwen3-0.6B", "--revision", "v9", *cache],
            HF_ENDPOINT=hub.endpoint,
        )
        repo = neuraxis(["model", "pull", "Qwen/Other", *cache], HF_ENDPOINT=hub.endpoint)
    assert (revision.returncode, revision.stderr) == (
        1,
        "neuraxis: Qwen/Qwen3-0.6B has no revision 'v9'\n",
    )
    assert (repo.returncode, repo.stderr) == (
        1,
        f"neuraxis: no repository Qwen/Other on the hub at {hub.endpoint}, or it is private "
        "or gated: HF_TOKEN (or `hf auth login`) gives the token that may read it\n",
    )
