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
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from harness.figures import recorded_figures
from harness.sim_cluster import SimCluster, ready_sim_cluster, two_replica_spec
from harness.streaming_load import Load

MODEL = "sim-adopt"
CONTROLLER = "neuraxis-controller"
NAMESPACE = "neuraxis"


@pytest.fixture(scope="module")
def ray_cluster(logs_dir: Path) -> Iterator[SimCluster]:
    with ready_sim_cluster(
        two_replica_spec(MODEL), logs_dir, MODEL, ("ada", "blackwell")
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
