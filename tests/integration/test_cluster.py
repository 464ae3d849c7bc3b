"""Cluster mode on a real multi-node Ray cluster on one machine
(ray.cluster_utils.Cluster): a head and three GPU nodes labelled ampere, ada
and blackwell (two logical GPUs each), cortex in cluster mode with a
deployment spec, the controller placing replicas that run the simulated
engine. Covers placement by generation, unplaceable specs, `neuraxis
status`, failover after a replica's actor is killed and after a whole node
leaves (under load), and draining on scale-down.

Failover figures (requests, failures, time to the replacement) are printed
and written to the logs directory as cluster-failover.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray
from ray.cluster_utils import Cluster

from tests.procs import Proc, free_port, wait_http_ready

GENERATION_LABEL = "neuraxis.io/generation"
MODEL = "sim-ada-plus"
SPEC = f"""
[[models]]
id = "{MODEL}"
source = "sim"
replicas = 2
min_generation = "ada"
[models.engine]
kind = "sim"
sim_ttft_s = 0.05
sim_itl_s = 0.02

# No hopper node in this cluster.
[[models]]
id = "sim-hopper"
source = "sim"
replicas = 1
generations = ["hopper"]
[models.engine]
kind = "sim"

# Ampere has no FP8 KV cache.
[[models]]
id = "fp8-on-ampere"
source = "sim"
replicas = 1
generations = ["ampere"]
[models.engine]
kind = "sim"
kv_cache_dtype = "fp8"
"""


@dataclass
class RayCluster:
    cluster: Any
    address: str
    base_url: str
    cortex: Proc
    nodes: dict[str, Any]  # generation -> ray node
    figures: dict[str, Any] = field(default_factory=dict)

    def status(self) -> dict[str, Any]:
        controller = ray.get_actor("neuraxis-controller", namespace="neuraxis")
        result: dict[str, Any] = ray.get(controller.status.remote(), timeout=30)
        return result

    def model(self, model_id: str) -> dict[str, Any]:
        return next(m for m in self.status()["models"] if m["id"] == model_id)

    def ready(self, model_id: str) -> list[dict[str, Any]]:
        return [r for r in self.model(model_id)["replicas"] if r["state"] == "ready"]

    def wait_ready(self, model_id: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = self.ready(model_id)
            if len(ready) == count and len(self.model(model_id)["replicas"]) == count:
                return ready
            time.sleep(0.2)
        raise AssertionError(f"{model_id}: not {count} ready replicas: {self.model(model_id)}")

    def generation_of(self, node_id: str) -> str | None:
        node = next(n for n in self.status()["nodes"] if n["node_id"] == node_id)
        return node["generation"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def ray_cluster(logs_dir: Path) -> Iterator[RayCluster]:
    # Replicas listen on loopback (inherited by the raylets' workers).
    os.environ["NEURAXIS_REPLICA_HOST"] = "127.0.0.1"
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    cortex: Proc | None = None
    try:
        nodes = {
            generation: cluster.add_node(
                num_cpus=1, num_gpus=2, labels={GENERATION_LABEL: generation}
            )
            for generation in ("ampere", "ada", "blackwell")
        }
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="neuraxis", log_to_driver=False)
        spec = logs_dir / "cluster-deployment.toml"
        spec.write_text(SPEC)
        port = free_port()
        os.environ["NEURAXIS_CORTEX_HEALTH_INTERVAL_S"] = "0.5"
        cortex = Proc(
            ["cortex", "--port", str(port), "--ray-address", cluster.address,
             "--deployment", str(spec)],
            logs_dir / "cluster-cortex.log",
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        wait_http_ready(cortex, f"{base}/v1/models/{MODEL}", 90)
        rc = RayCluster(cluster, cluster.address, base, cortex, nodes)
        rc.wait_ready(MODEL, 2)
        yield rc
        (logs_dir / "cluster-failover.json").write_text(json.dumps(rc.figures, indent=2))
    finally:
        os.environ.pop("NEURAXIS_CORTEX_HEALTH_INTERVAL_S", None)
        os.environ.pop("NEURAXIS_REPLICA_HOST", None)
        if cortex is not None:
            cortex.stop()
        ray.shutdown()
        cluster.shutdown()


# -- a client that keeps sending streamed requests ---------------------------


@dataclass
class Outcome:
    first_token: bool = False
    finished: bool = False  # a finish_reason and [DONE]
    done: bool = False  # the stream ended with [DONE]
    error: str | None = None


def stream_once(client: httpx.Client, max_tokens: int) -> Outcome:
    outcome = Outcome()
    body = {
        "model": MODEL,
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "hello"}],
    }
    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                outcome.error = f"HTTP {response.status_code}: {response.text[:200]}"
                return outcome
            finish = None
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: ") :]
                if data == "[DONE]":
                    outcome.done = True
                    outcome.finished = finish is not None and outcome.error is None
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    outcome.error = chunk["error"]["message"]
                    continue
                for choice in chunk["choices"]:
                    if choice["delta"].get("content"):
                        outcome.first_token = True
                    finish = choice.get("finish_reason") or finish
    except httpx.HTTPError as e:
        outcome.error = f"{type(e).__name__}: {e}"
    return outcome


class Load:
    """Clients sending streamed requests back to back until stopped."""

    def __init__(self, base_url: str, clients: int, max_tokens: int = 10) -> None:
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(base_url, max_tokens), daemon=True)
            for _ in range(clients)
        ]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _run(self, base_url: str, max_tokens: int) -> None:
        with httpx.Client(base_url=base_url, timeout=60) as client:
            while not self._stop.is_set():
                outcome = stream_once(client, max_tokens)
                with self._lock:
                    self.outcomes.append(outcome)

    def count(self) -> int:
        with self._lock:
            return len(self.outcomes)

    def summary(self) -> dict[str, int]:
        with self._lock:
            done = list(self.outcomes)
        return {
            "requests": len(done),
            "completed": sum(o.finished for o in done),
            "failed_before_first_token": sum(
                1 for o in done if not o.finished and not o.first_token
            ),
            "failed_mid_stream": sum(1 for o in done if not o.finished and o.first_token),
        }


def assert_no_unstarted_request_failed(load: Load) -> None:
    """The failover contract: a request that had received nothing was retried
    on another replica; one cut after its first token ended with an error
    event and [DONE], never a hang or a bare disconnect."""
    assert load.summary()["failed_before_first_token"] == 0, load.outcomes
    cut = [o for o in load.outcomes if not o.finished]
    assert all(o.first_token and o.error and o.done for o in cut), cut


def wait_for_failover(rc: RayCluster, lost: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        failovers = [f for f in rc.status()["failovers"] if f["replica"] == lost]
        if failovers:
            return failovers[0]  # type: ignore[no-any-return]
        time.sleep(0.2)
    raise AssertionError(f"no replacement for {lost}: {rc.status()}")


# -- the tests ---------------------------------------------------------------


def test_replicas_are_placed_only_on_ada_or_newer(ray_cluster: RayCluster) -> None:
    ready = ray_cluster.ready(MODEL)
    generations = sorted(ray_cluster.generation_of(r["node_id"]) or "" for r in ready)
    # SPREAD across the two eligible nodes; never the ampere one.
    assert generations == ["ada", "blackwell"]
    assert all(r["generation"] in ("ada", "blackwell") for r in ready)
    r = httpx.post(
        f"{ray_cluster.base_url}/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "tok0 tok1 tok2"


def test_unsatisfiable_specs_are_reported_not_retried(ray_cluster: RayCluster) -> None:
    hopper = ray_cluster.model("sim-hopper")
    assert hopper["unplaceable"] == (
        "no node of generation hopper in the cluster (generations present: ada, ampere, blackwell)"
    )
    fp8 = ray_cluster.model("fp8-on-ampere")
    assert "KV-cache dtype 'fp8' is not available on ampere" in fp8["unplaceable"]
    # No actor was ever created for them, however many passes went by.
    time.sleep(2)
    assert ray_cluster.model("sim-hopper")["replicas"] == []
    assert ray_cluster.model("fp8-on-ampere")["replicas"] == []
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert not any(n.startswith(("sim-hopper", "fp8-on-ampere")) for n in names)
    # The client asking for it hears why it cannot be served now.
    r = httpx.post(
        f"{ray_cluster.base_url}/v1/chat/completions",
        json={"model": "sim-hopper", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert r.status_code == 503
    assert r.json()["error"]["type"] == "server_error"


def test_status_command_shows_nodes_models_replicas_and_reasons(
    ray_cluster: RayCluster, logs_dir: Path
) -> None:
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", "status", "--address", ray_cluster.address],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = out.stdout
    (logs_dir / "cluster-status.txt").write_text(text)
    print(text)
    for generation in ("ampere", "ada", "blackwell"):
        assert f"  {generation}  " in text
    assert any(line.split()[:2] == [MODEL, "2/2"] for line in text.splitlines())
    assert "UNPLACEABLE" in text and "no node of generation hopper" in text
    as_json = subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", "status", "--address", ray_cluster.address,
         "--json"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    data = json.loads(as_json.stdout)
    assert {n["generation"] for n in data["nodes"]} >= {"ampere", "ada", "blackwell"}


def test_a_killed_replica_is_replaced_and_no_unstarted_request_fails(
    ray_cluster: RayCluster,
) -> None:
    victim = ray_cluster.ready(MODEL)[0]
    with Load(ray_cluster.base_url, clients=4) as load:
        while load.count() < 20:
            time.sleep(0.05)
        ray.kill(ray.get_actor(victim["id"], namespace="neuraxis"))
        failover = wait_for_failover(ray_cluster, victim["id"])
        ray_cluster.wait_ready(MODEL, 2)
        settled = load.count()
        while load.count() < settled + 20:
            time.sleep(0.05)
    summary = load.summary()
    ray_cluster.figures["actor_killed"] = {
        **summary,
        "seconds_to_ready": failover["seconds_to_ready"],
    }
    print("actor killed:", ray_cluster.figures["actor_killed"])
    assert_no_unstarted_request_failed(load)
    assert summary["completed"] >= 40
    replacement = next(r for r in ray_cluster.ready(MODEL) if r["id"] == failover["replacement"])
    assert ray_cluster.generation_of(replacement["node_id"]) in ("ada", "blackwell")


def test_a_crashed_neuron_is_replaced_and_cut_streams_end_with_an_error_event(
    ray_cluster: RayCluster,
) -> None:
    victim = ray_cluster.ready(MODEL)[0]
    with Load(ray_cluster.base_url, clients=4, max_tokens=40) as load:
        while load.count() < 8:
            time.sleep(0.05)
        # Mid-way through the clients' streams (each ~0.85 s), not at their start.
        time.sleep(0.4)
        os.kill(victim["pid"], signal.SIGKILL)  # the engine process dies at once
        failover = wait_for_failover(ray_cluster, victim["id"])
        ray_cluster.wait_ready(MODEL, 2)
        settled = load.count()
        while load.count() < settled + 8:
            time.sleep(0.05)
    summary = load.summary()
    ray_cluster.figures["neuron_killed"] = {
        **summary,
        "seconds_to_ready": failover["seconds_to_ready"],
    }
    print("neuron SIGKILLed:", ray_cluster.figures["neuron_killed"])
    assert_no_unstarted_request_failed(load)
    assert "exited" in failover["reason"]


def test_a_lost_node_is_replaced_elsewhere_and_no_unstarted_request_fails(
    ray_cluster: RayCluster,
) -> None:
    ready = ray_cluster.ready(MODEL)
    victim = next(r for r in ready if ray_cluster.generation_of(r["node_id"]) == "ada")
    with Load(ray_cluster.base_url, clients=4) as load:
        while load.count() < 20:
            time.sleep(0.05)
        ray_cluster.cluster.remove_node(ray_cluster.nodes["ada"])
        failover = wait_for_failover(ray_cluster, victim["id"])
        ray_cluster.wait_ready(MODEL, 2)
        settled = load.count()
        while load.count() < settled + 20:
            time.sleep(0.05)
    summary = load.summary()
    ray_cluster.figures["node_removed"] = {
        **summary,
        "seconds_to_ready": failover["seconds_to_ready"],
    }
    print("node removed:", ray_cluster.figures["node_removed"])
    assert_no_unstarted_request_failed(load)
    # Both replicas now on the blackwell node: the only eligible one left.
    generations = [ray_cluster.generation_of(r["node_id"]) for r in ray_cluster.ready(MODEL)]
    assert generations == ["blackwell", "blackwell"]
    dead = [n for n in ray_cluster.status()["nodes"] if not n["alive"]]
    assert [n["generation"] for n in dead] == ["ada"]


def test_scaling_down_drains_in_flight_streams(ray_cluster: RayCluster) -> None:
    controller = ray.get_actor("neuraxis-controller", namespace="neuraxis")
    results: list[Outcome] = []

    def one() -> None:
        with httpx.Client(base_url=ray_cluster.base_url, timeout=60) as client:
            results.append(stream_once(client, max_tokens=100))  # ~2 s each

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    # Wait until both replicas are generating.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        busy = [r for r in ray_cluster.ready(MODEL) if r["in_flight"]]
        if len(busy) == 2:
            break
        time.sleep(0.1)
    ray.get(controller.scale.remote(MODEL, 1), timeout=30)
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 6
    assert all(o.finished and o.error is None for o in results), results
    remaining = ray_cluster.wait_ready(MODEL, 1)
    assert len(remaining) == 1
    ray.get(controller.scale.remote(MODEL, 2), timeout=30)
    ray_cluster.wait_ready(MODEL, 2)
