"""A real Ray cluster on one machine for failover tests and benchmarks: a head
and GPU nodes labelled with their generation (logical GPUs), with cortex in
cluster mode in front of replicas that run the simulated engine.

Replicas listen on loopback (NEURAXIS_REPLICA_HOST, inherited by the nodes)
and the Ray nodes stay on this machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ray
from ray.cluster_utils import Cluster

from axon.generations import GENERATION_LABEL
from harness.ports import free_port
from harness.procs import Proc, wait_http_ready
from harness.sim_specs import sim_replicas_spec

NAMESPACE = "neuraxis"
# One GPU node of each, unless a test asks for others.
GENERATIONS = ("ampere", "ada", "blackwell")
# Ray processes the tests never use, left out of every cluster they start:
# no dashboard; no log monitor (drivers join with log_to_driver=False, so it
# forwards nothing); no autoscaler monitor on the head (nothing autoscales
# Ray's nodes). Each was a Python process to start per node.
QUIET_NODE: dict[str, Any] = {"include_dashboard": False, "include_log_monitor": False}
QUIET_HEAD: dict[str, Any] = {**QUIET_NODE, "no_monitor": True}


def two_replica_spec(model: str) -> str:
    """A deployment-spec entry: two simulated replicas of `model` on ada or
    newer (50 ms to the first token, 20 ms between tokens)."""
    return sim_replicas_spec(model, 2)


@dataclass
class SimCluster:
    cluster: Any
    address: str
    base_url: str
    nodes: dict[str, Any]  # generation -> the Ray node
    cortex_log: Path

    def add_node(self, generation: str, gpus: int = 2) -> Any:
        node = self.cluster.add_node(
            num_cpus=1,
            num_gpus=gpus,
            labels={GENERATION_LABEL: generation},
            include_log_monitor=False,
        )
        self.nodes[generation] = node
        return node

    def status(self) -> dict[str, Any]:
        controller = ray.get_actor("neuraxis-controller", namespace=NAMESPACE)
        return cast(dict[str, Any], ray.get(controller.status.remote(), timeout=30))

    def model(self, model_id: str) -> dict[str, Any]:
        return next(m for m in self.status()["models"] if m["id"] == model_id)

    def ready(self, model_id: str) -> list[dict[str, Any]]:
        return [r for r in self.model(model_id)["replicas"] if r["state"] == "ready"]

    def wait_ready(self, model_id: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        """Until exactly `count` replicas of the model exist and are ready."""
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

    def wait_for_failover(self, lost: str, timeout: float = 60) -> dict[str, Any]:
        """The controller's record of the replacement of replica `lost`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            failovers = [f for f in self.status()["failovers"] if f["replica"] == lost]
            if failovers:
                return failovers[0]  # type: ignore[no-any-return]
            time.sleep(0.1)
        raise AssertionError(f"no replacement for {lost}: {self.status()}")


@contextmanager
def sim_cluster(
    spec: str,
    work_dir: Path,
    generations: tuple[str, ...] = GENERATIONS,
    health_interval_s: float = 0.5,
    wait_for_model: str | None = None,
    plaintext: bool = True,
) -> Iterator[SimCluster]:
    """`plaintext`: cortex's gRPC without TLS, on purpose (Ray names this
    host by its address, not loopback); False when the caller gives cortex
    its TLS files (NEURAXIS_CORTEX_TLS_*)."""
    os.environ["NEURAXIS_REPLICA_HOST"] = "127.0.0.1"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, **QUIET_HEAD})
    cortex: Proc | None = None
    try:
        # One log per cluster: modules share the logs directory, and a failed
        # module's cortex log must survive the next module's cluster.
        log = work_dir / f"cluster-cortex-{wait_for_model or 'any'}.log"
        sim = SimCluster(cluster, cluster.address, "", {}, log)
        for generation in generations:
            sim.add_node(generation)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
        spec_path = work_dir / "cluster-deployment.toml"
        spec_path.write_text(spec)
        port = free_port()
        # Nothing here reads the admin listener: a free port, never the default's.
        args = ["cortex", "--port", str(port), "--admin-port", "0"]
        args += ["--plaintext"] if plaintext else []
        args += ["--ray-address", cluster.address, "--deployment", str(spec_path)]
        interval = {"NEURAXIS_CORTEX_HEALTH_INTERVAL_S": str(health_interval_s)}
        cortex = Proc(args, sim.cortex_log, interval)
        sim.base_url = f"http://127.0.0.1:{port}"
        if wait_for_model:
            wait_http_ready(cortex, f"{sim.base_url}/v1/models/{wait_for_model}", 90)
        yield sim
    finally:
        os.environ.pop("NEURAXIS_REPLICA_HOST", None)
        if cortex is not None:
            cortex.stop(timeout=30)
        ray.shutdown()
        cluster.shutdown()


@contextmanager
def ready_sim_cluster(
    spec: str, work_dir: Path, model: str, generations: tuple[str, ...] = GENERATIONS
) -> Iterator[SimCluster]:
    """sim_cluster once cortex serves `model` and both its replicas (as
    two_replica_spec writes it) are ready."""
    with sim_cluster(spec, work_dir, generations, wait_for_model=model) as cluster:
        cluster.wait_ready(model, 2)
        yield cluster
