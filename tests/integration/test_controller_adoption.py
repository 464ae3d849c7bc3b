"""A controller that comes back and adopts, on a real Ray cluster on one
machine (harness/sim_cluster.py: a head, an ada and a blackwell node, cortex
in cluster mode, two simulated replicas).

Under a steady streaming load the controller actor is killed, once for good
(`no_restart=True`: cortex's follower re-creates it) and once letting Ray
restart it, each paired with a control run of the same load and no kill.
Each run checks: requests failed 0, the replicas' neuron pids unchanged
(engines reloaded 0), cortex's follower back on the controller. The time
from the kill to the new controller's first table (the adoption) is
printed and written to the logs directory as controller-adoption.json.

The model takes LoRA adapters: `neuraxis adapters add | list | remove`
through the controller (the table, the status and the admin listener's
list showing it), and an added adapter outliving a controller that was
killed for good.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray

from harness.figures import recorded_figures
from harness.sim_cluster import SimCluster, ready_sim_cluster, two_replica_spec
from harness.streaming_load import Load

MODEL = "sim-adopt"
LORA = """
[models.lora]
max_adapters_per_replica = 2
max_rank = 16
"""
CONTROLLER = "neuraxis-controller"
NAMESPACE = "neuraxis"


@pytest.fixture(scope="module")
def ray_cluster(logs_dir: Path) -> Iterator[SimCluster]:
    with ready_sim_cluster(
        two_replica_spec(MODEL) + LORA, logs_dir, MODEL, ("ada", "blackwell")
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def figures(logs_dir: Path) -> Iterator[dict[str, Any]]:
    with recorded_figures(logs_dir / "controller-adoption.json") as found:
        yield found


def _neurons(cluster: SimCluster) -> dict[str, int]:
    """Replica id -> its neuron's pid, for the ready replicas."""
    return {r["id"]: r["pid"] for r in cluster.ready(MODEL)}


def _table(timeout: float) -> dict[str, Any] | None:
    """The current controller's published table, once it has one."""
    try:
        controller = ray.get_actor(CONTROLLER, namespace=NAMESPACE)
        table: Any = ray.get(controller.table.remote(0, 0.0), timeout=timeout)
    except (ValueError, ray.exceptions.RayError):
        return None
    return table if table["version"] > 0 else None


def _wait_for_table(old_epoch: str, replicas: set[str], timeout: float = 60) -> float:
    """Seconds until a controller of another epoch than `old_epoch`
    publishes a table of exactly `replicas`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        table = _table(timeout=5)
        if table and table["epoch"] != old_epoch:
            assert {r["replica"] for r in table["replicas"]} == replicas, table
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"no new controller's table after {timeout} s")


def _follower_back(cluster: SimCluster, before: int, timeout: float = 60) -> None:
    """Until cortex logs that it regained the controller (once more than
    `before` times)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.cortex_log.read_text().count("the controller is back") > before:
            return
        time.sleep(0.1)
    raise AssertionError(
        f"cortex never regained the controller:\n{cluster.cortex_log.read_text()[-3000:]}"
    )


@pytest.mark.parametrize("kill", ["none", "for_good", "ray_restarts"])
def test_a_lost_controller_comes_back_and_adopts_without_failing_a_request(
    ray_cluster: SimCluster, figures: dict[str, Any], kill: str
) -> None:
    neurons = _neurons(ray_cluster)
    assert len(neurons) == 2
    table = _table(timeout=30)
    assert table is not None
    backs = ray_cluster.cortex_log.read_text().count("the controller is back")
    with Load(ray_cluster.base_url, MODEL, clients=4) as load:
        load.wait_for(8)
        figure: dict[str, Any] = {}
        if kill != "none":
            controller = ray.get_actor(CONTROLLER, namespace=NAMESPACE)
            ray.kill(controller, no_restart=kill == "for_good")
            figure["seconds_to_adoption"] = round(_wait_for_table(table["epoch"], set(neurons)), 2)
            _follower_back(ray_cluster, backs)
        load.wait_for(16)
    after = _neurons(ray_cluster)
    summary = load.summary()
    figure.update(summary)
    figure["engines_reloaded"] = sum(1 for r, pid in neurons.items() if after.get(r) != pid)
    figures[kill] = figure
    print(f"controller killed: {kill}:", figure)
    assert summary["failed_before_first_token"] == 0 and summary["failed_mid_stream"] == 0
    assert summary["completed"] == summary["requests"] >= 24
    assert after == neurons  # the same replicas, the same neuron processes
    if kill == "none":
        current = _table(timeout=30)
        assert current is not None and current["epoch"] == table["epoch"]


def _adapters(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", "adapters", *args, "--address", cluster.address],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _listed() -> dict[str, dict[str, Any]]:
    """What `neuraxis adapters list --json` prints, asked of the controller
    from this process (each command run costs seconds of imports)."""
    controller = ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    listed: dict[str, Any] = ray.get(controller.list_adapters.remote(), timeout=30)
    return {a["id"]: a for a in listed["adapters"]}


def _parent_in_models(cluster: SimCluster, adapter: str, timeout: float = 30) -> str | None:
    """The adapter's parent in cortex's /v1/models once it lists the adapter
    (its pool learns it at its next Info poll); None if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        models = httpx.get(f"{cluster.base_url}/v1/models", timeout=10).json()["data"]
        found = [m.get("parent") for m in models if m["id"] == adapter]
        if found:
            return found[0]  # type: ignore[no-any-return]
        time.sleep(0.1)
    return None


def _chat(cluster: SimCluster, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(f"{cluster.base_url}/v1/chat/completions", json=body, timeout=30)


def test_an_adapter_added_through_the_controller_outlives_it_and_is_removed(
    ray_cluster: SimCluster, tmp_path: Path
) -> None:
    good, big = tmp_path / "legal", tmp_path / "big"
    for path, rank in ((good, 8), (big, 64)):
        path.mkdir()
        (path / "adapter_config.json").write_text(json.dumps({"r": rank}))
    refused = _adapters(ray_cluster, "add", MODEL, "big", str(big))
    assert refused.returncode == 1 and "rank 64 is above max_rank 16" in refused.stderr
    added = _adapters(ray_cluster, "add", MODEL, "legal", str(good))
    assert added.returncode == 0, added.stderr
    replicas = set(_neurons(ray_cluster))
    listed = _adapters(ray_cluster, "list")
    assert listed.returncode == 0, listed.stderr
    [header, row] = listed.stdout.splitlines()
    assert header.split() == ["ADAPTER", "MODEL", "ADDED", "SERVED", "BY", "HELD", "BY", "SOURCE"]
    assert row.split()[:4] == ["legal", MODEL, "run", "time"]
    assert set(row.split()[4].split(",")) == replicas and row.split()[-1] == str(good)
    assert _parent_in_models(ray_cluster, "legal") == MODEL
    answer = _chat(ray_cluster, "legal")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"].startswith("legal:")

    # A controller killed for good: cortex's follower creates another, which
    # adopts the replicas and lays the saved change over cortex's spec.
    table = _table(timeout=30)
    assert table is not None
    # cortex's table carries the added adapter (a request for it wakes its
    # base scaled to zero), and `neuraxis status` shows it.
    assert table["adapters"] == {"legal": MODEL}
    controller = ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    status = ray.get(controller.status.remote(), timeout=30)
    assert [m["adapters"] for m in status["models"]] == [["legal"]]
    ray.kill(ray.get_actor(CONTROLLER, namespace=NAMESPACE), no_restart=True)
    _wait_for_table(table["epoch"], replicas)
    assert set(_listed()["legal"]["replicas"]) == replicas

    removed = _adapters(ray_cluster, "remove", "legal")
    assert removed.returncode == 0, removed.stderr
    assert _listed() == {}
    gone = _chat(ray_cluster, "legal")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"

    # cortex's admin listener goes through the controller too (vLLM's body).
    admin = _admin_url(ray_cluster)
    body = {"lora_name": "legal", "lora_path": str(good)}
    loaded = httpx.post(f"{admin}/v1/load_lora_adapter", json=body, timeout=120)
    assert loaded.status_code == 200, loaded.text
    assert _listed()["legal"]["added_at_run_time"]
    [card] = httpx.get(f"{admin}/v1/adapters", timeout=30).json()["data"]
    assert (card["id"], card["parent"], card["origin"]) == ("legal", MODEL, "run-time")
    assert card["source"] == str(good) and len(card["served_by"]) == len(replicas)
    too_big = {"model": MODEL, "id": "big", "source": str(big)}
    refused_here = httpx.post(f"{admin}/v1/adapters", json=too_big, timeout=120)
    assert refused_here.status_code == 400 and refused_here.json()["error"]["param"] == "source"
    assert httpx.delete(f"{admin}/v1/adapters/legal", timeout=120).status_code == 200
    assert _listed() == {}


def _admin_url(cluster: SimCluster) -> str:
    """cortex's admin listener (started on a free port), as its log says."""
    found = re.search(r"admin listener on (http://\S+)", cluster.cortex_log.read_text())
    assert found is not None
    return found.group(1)
