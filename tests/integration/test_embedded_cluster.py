"""The embedded default runs on Ray: `neuraxis status` on the stack of
`neuraxis up` shows its cpu node and both replicas placed and ready, and
the local Ray takes only clients that hold the run's token."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness.procs import REPO
from harness.stacks import EMBEDDING_MODEL, MODEL, Stack


def _status(address: str | None, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    where = ["--address", address] if address else []
    return subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", "status", *where, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


def test_status_of_the_embedded_cluster(stack: Stack) -> None:
    found = json.loads((stack.state_dir / "embedded-cluster.json").read_text())
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=found["token"])
    out = _status(found["address"], env)
    assert out.returncode == 0, out.stderr[-2000:]
    status = json.loads(out.stdout)
    assert [n["generation"] for n in status["nodes"] if n["alive"]] == ["cpu"]
    models = {m["id"]: m for m in status["models"]}
    assert set(models) == {MODEL, EMBEDDING_MODEL}
    for model in models.values():
        (replica,) = model["replicas"]
        assert replica["state"] == "ready" and replica["generation"] == "cpu"
        # Replicas of the embedded default listen on loopback only.
        assert replica["address"].startswith("127.0.0.1:")
    assert models[MODEL]["replicas"][0]["address"] == stack.neuron_address


def test_the_local_ray_refuses_a_client_without_the_token(stack: Stack) -> None:
    found = json.loads((stack.state_dir / "embedded-cluster.json").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    out = _status(found["address"], env)
    assert out.returncode != 0
    assert "token" in (out.stdout + out.stderr).lower()


def test_status_with_no_arguments_finds_the_running_up(stack: Stack) -> None:
    """What a user types in a second terminal: the address and the token come
    from the state directory of the running `neuraxis up`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env["XDG_STATE_HOME"] = str(stack.state_dir.parent)
    out = _status(None, env)
    assert out.returncode == 0, out.stderr[-2000:]
    models = {m["id"] for m in json.loads(out.stdout)["models"]}
    assert models == {MODEL, EMBEDDING_MODEL}
