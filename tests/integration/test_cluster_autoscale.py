"""Autoscaling on a real Ray cluster on one machine (a head and a CPU node)
with simulated engines (harness/sim_cluster.py), one cluster for the file: a
step from 1x to 6x load scales a model up to what the load needs and back
down once it ends, with no failed request; a model at min_replicas = 0
goes to zero after idling and the next request is served after a replica
loads (with its cold start in a header), not refused.

The figures (replicas over the step, the cold start) go to the logs
directory as cluster-autoscale.json.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.figures import recorded_figures
from harness.polling import wait_until
from harness.sim_cluster import SimCluster, sim_cluster
from harness.sim_specs import autoscaled_spec
from harness.streaming_load import Load

STEP = "step-model"
ZERO = "zero-model"
# One replica carries 3 requests: 2 clients (1x) want 1 replica, 12 (6x) want 4.
SPEC = autoscaled_spec(
    STEP,
    "min_replicas = 1\nmax_replicas = 4\ntarget_in_flight = 3\n"
    "scale_up_after_s = 1\nscale_down_after_s = 6",
) + autoscaled_spec(
    ZERO,
    "min_replicas = 0\nmax_replicas = 1\nscale_down_after_s = 1\nscale_to_zero_after_s = 4",
    engine="sim_load_s = 1.0",
)


@pytest.fixture(scope="module")
def cluster(logs_dir: Path) -> Iterator[SimCluster]:
    # One CPU node holds every sim replica (they take no GPU): the lightest
    # cluster; placement by generation is test_cluster.py's.
    with sim_cluster(SPEC, logs_dir, ("cpu",), wait_for_model=STEP) as found:
        found.wait_ready(STEP, 1)
        yield found


@pytest.fixture(scope="module")
def figures(logs_dir: Path) -> Iterator[dict[str, Any]]:
    with recorded_figures(logs_dir / "cluster-autoscale.json") as found:
        yield found


def _ready(cluster: SimCluster, model: str) -> int:
    return len(cluster.ready(model))


def _desired(cluster: SimCluster, model: str) -> int:
    return int(cluster.model(model)["desired"])


def test_a_step_of_load_scales_up_then_back_down_with_no_failed_request(
    cluster: SimCluster, figures: dict[str, Any]
) -> None:
    with Load(cluster.base_url, STEP, clients=2, max_tokens=40) as base:
        base.wait_for(10)
        assert _desired(cluster, STEP) == 1
        with Load(cluster.base_url, STEP, clients=10, max_tokens=40) as step:
            assert wait_until(lambda: _ready(cluster, STEP) == 4, timeout_s=60), cluster.model(STEP)
            step.wait_for(20)  # served on the 4 replicas for a while
    scaled = cluster.model(STEP)["autoscale"]
    assert wait_until(
        lambda: _desired(cluster, STEP) == 1 and len(cluster.model(STEP)["replicas"]) == 1,
        timeout_s=60,
    ), cluster.model(STEP)
    outcomes = base.outcomes + step.outcomes
    failed = [o for o in outcomes if not o.finished]
    assert failed == [], failed[:3]
    figures["step"] = {
        "requests": len(outcomes),
        "failed": len(failed),
        "peak_replicas": 4,
        "scale_up": scaled,
        "scale_down": cluster.model(STEP)["autoscale"],
    }


def test_a_model_at_min_zero_idles_to_zero_and_the_next_request_is_served(
    cluster: SimCluster, figures: dict[str, Any]
) -> None:
    listed = httpx.get(f"{cluster.base_url}/v1/models").json()["data"]
    assert {"id": ZERO, "state": "sleeping"}.items() <= next(
        m for m in listed if m["id"] == ZERO
    ).items()
    body = {"model": ZERO, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    woken = httpx.post(f"{cluster.base_url}/v1/chat/completions", json=body, timeout=120)
    assert woken.status_code == 200, woken.text
    first_cold_ms = int(woken.headers["x-neuraxis-cold-start-ms"])
    assert first_cold_ms >= 1000  # at least the replica's 1 s load
    # Idle: down to zero after 4 s, the replica drained.
    assert wait_until(
        lambda: _desired(cluster, ZERO) == 0 and not cluster.model(ZERO)["replicas"],
        timeout_s=60,
    ), cluster.model(ZERO)
    assert cluster.model(ZERO)["autoscale"]["reason"] == "idle"
    again = httpx.post(f"{cluster.base_url}/v1/chat/completions", json=body, timeout=120)
    assert again.status_code == 200, again.text
    figures["scale_to_zero"] = {
        "first_cold_start_ms": first_cold_ms,
        "second_cold_start_ms": int(again.headers["x-neuraxis-cold-start-ms"]),
    }
