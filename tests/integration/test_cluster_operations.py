"""Operating a cluster under load, on a real Ray cluster on one machine
(bench/sim_cluster.py: a head, an ada, a hopper and a blackwell node,
cortex in cluster mode, two simulated replicas), each case paired with a
control run of the same load:

- `neuraxis node drain` of a node holding a replica: requests failed 0,
  the model never below two ready replicas, the replica now on the free
  node, the drained node empty and marked; `uncordon` clears the mark;
- two more cortex instances following the same controller and sharing one
  PostgreSQL store, load on both, one SIGKILLed: requests failed on the
  other 0.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.sim_cluster import SimCluster, sim_cluster, two_replica_spec
from bench.streaming_load import Load
from tests.postgres import postgres_server
from tests.procs import REPO, Proc, child_env, free_port, wait_http_ready

MODEL = "sim-ops"


@pytest.fixture(scope="module")
def ray_cluster(logs_dir: Path) -> Iterator[SimCluster]:
    generations = ("ada", "hopper", "blackwell")
    with sim_cluster(
        two_replica_spec(MODEL), logs_dir, generations=generations, wait_for_model=MODEL
    ) as cluster:
        cluster.wait_ready(MODEL, 2)
        yield cluster


def _node_cli(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "neuraxis.app.cli", "node", *args]
    return subprocess.run(
        [*command, "--address", cluster.address],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO,
        timeout=300,
    )


class ReadyWatch:
    """The fewest ready replicas of MODEL seen, sampled until stopped."""

    def __init__(self, cluster: SimCluster) -> None:
        self.fewest = 99
        self._cluster, self._stop = cluster, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.fewest = min(self.fewest, len(self._cluster.ready(MODEL)))

    def __enter__(self) -> ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.parametrize("drain", [False, True], ids=["control", "drain"])
def test_draining_a_node_under_load_fails_no_request(ray_cluster: SimCluster, drain: bool) -> None:
    ready = ray_cluster.wait_ready(MODEL, 2)
    before = {r["id"]: r["node_id"] for r in ready}
    victim_replica, victim_node = sorted(before.items())[0]
    with ReadyWatch(ray_cluster) as watch, Load(ray_cluster.base_url, MODEL, clients=4) as load:
        load.wait_for(8)
        started = time.monotonic()
        if drain:
            done = _node_cli(ray_cluster, "drain", victim_node)
            assert done.returncode == 0, done.stdout + done.stderr
            print(done.stdout)
        took = time.monotonic() - started
        load.wait_for(16)
    summary = load.summary()
    after = {r["id"]: r["node_id"] for r in ray_cluster.wait_ready(MODEL, 2)}
    print(f"\nnode drain ({'drain' if drain else 'control'}): {summary}, fewest ready "
          f"{watch.fewest}, drain took {took:.1f} s, replicas {before} -> {after}")  # fmt: skip
    assert summary["failed_before_first_token"] == 0 and summary["failed_mid_stream"] == 0
    assert summary["completed"] == summary["requests"] >= 24
    assert watch.fewest == 2
    if not drain:
        assert after == before
        return
    assert victim_replica not in after and victim_node not in after.values()
    marks = {n["node_id"]: n["mark"] for n in ray_cluster.status()["nodes"]}
    assert marks[victim_node] == "draining"
    done = _node_cli(ray_cluster, "uncordon", victim_node[:12])
    assert done.returncode == 0, done.stderr
    marks = {n["node_id"]: n["mark"] for n in ray_cluster.status()["nodes"]}
    assert marks[victim_node] is None


@pytest.fixture(scope="module")
def two_cortexes(ray_cluster: SimCluster, logs_dir: Path) -> Iterator[list[tuple[str, Proc]]]:
    spec = logs_dir / "cluster-deployment.toml"  # the one the cluster's cortex follows
    with postgres_server() as dsn:
        made: list[tuple[str, Proc]] = []
        try:
            for i in range(2):
                port = free_port()
                args = ["cortex", "--port", str(port), "--admin-port", "0"]
                args += ["--ray-address", ray_cluster.address, "--deployment", str(spec)]
                proc = Proc([*args, "--postgres-dsn", dsn], logs_dir / f"ops-cortex{i}.log")
                made.append((f"http://127.0.0.1:{port}", proc))
                wait_http_ready(proc, f"http://127.0.0.1:{port}/readyz", 120)
            yield made
        finally:
            for _, proc in made:
                proc.stop()


@pytest.mark.parametrize("kill", [False, True], ids=["control", "kill"])
def test_killing_one_cortex_fails_nothing_on_the_other(
    two_cortexes: list[tuple[str, Proc]], kill: bool
) -> None:
    (killed_url, killed), (other_url, _) = two_cortexes
    assert killed.alive(), "a previous case killed it"
    with Load(other_url, MODEL, clients=3) as other, Load(killed_url, MODEL, clients=3) as doomed:
        other.wait_for(8)
        doomed.wait_for(4)
        if kill:
            killed.popen.send_signal(signal.SIGKILL)
            killed.popen.wait(10)
        other.wait_for(16)
    summary = other.summary()
    print(f"\ntwo cortexes ({'one killed' if kill else 'control'}): the other {summary}, "
          f"the killed one's own {doomed.summary()}")  # fmt: skip
    assert summary["failed_before_first_token"] == 0 and summary["failed_mid_stream"] == 0
    assert summary["completed"] == summary["requests"] >= 24
