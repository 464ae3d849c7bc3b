"""Operating a cluster under load, on a real Ray cluster on one machine
(harness/sim_cluster.py: a head, an ada, a hopper and a blackwell node,
cortex in cluster mode, two simulated replicas), each case paired with a
control run of the same load:

- `neuraxis node drain` of a node holding a replica: requests failed 0,
  the model never below two ready replicas, the replica now on the free
  node, the drained node empty and marked; `uncordon` clears the mark;
- two more cortex instances following the same controller and sharing one
  PostgreSQL store, load on both, one SIGKILLed and started again on its
  port: requests failed on the other 0, replicas reloaded 0, the time until
  the restarted one serves again.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.ports import free_port
from harness.postgres import postgres_server
from harness.procs import REPO, Proc, child_env, wait_http_ready
from harness.sim_cluster import SimCluster, ready_sim_cluster, two_replica_spec
from harness.streaming_load import Load

MODEL = "sim-ops"


@pytest.fixture(scope="module")
def ray_cluster(logs_dir: Path) -> Iterator[SimCluster]:
    generations = ("ada", "hopper", "blackwell")
    with ready_sim_cluster(two_replica_spec(MODEL), logs_dir, MODEL, generations) as cluster:
        yield cluster


def _node_cli(cluster: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "neuraxis.cli", "node", *args]
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


@dataclass
class Instances:
    """cortex instances following the cluster's controller, sharing one
    PostgreSQL store; each can be killed and started again on its port."""

    cluster: SimCluster
    logs: Path
    dsn: str
    ports: list[int]
    procs: list[Proc] = field(default_factory=list)

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def start(self, i: int) -> Proc:
        spec = self.logs / "cluster-deployment.toml"  # the cluster's cortex follows it too
        args = ["cortex", "--port", str(self.ports[i]), "--admin-port", "0"]
        args += ["--ray-address", self.cluster.address, "--deployment", str(spec), "--plaintext"]
        log = self.logs / f"ops-cortex{i}-{len(self.procs)}.log"
        proc = Proc([*args, "--postgres-dsn", self.dsn], log)
        wait_http_ready(proc, f"{self.url(i)}/readyz", 120)
        self.procs.append(proc)
        return proc


@pytest.fixture(scope="module")
def two_cortexes(ray_cluster: SimCluster, logs_dir: Path) -> Iterator[Instances]:
    with postgres_server() as dsn:
        instances = Instances(ray_cluster, logs_dir, dsn, [free_port(), free_port()])
        try:
            instances.start(0)
            instances.start(1)
            yield instances
        finally:
            for proc in instances.procs:
                proc.stop()


def _pids(cluster: SimCluster) -> dict[str, int]:
    return {r["id"]: r["pid"] for r in cluster.ready(MODEL)}


@pytest.mark.parametrize("kill", [False, True], ids=["control", "kill"])
def test_killing_one_cortex_fails_nothing_on_the_other_and_reloads_nothing(
    two_cortexes: Instances, kill: bool
) -> None:
    cortexes = two_cortexes
    killed = cortexes.procs[0]
    assert killed.alive(), "a previous case killed it"
    pids = _pids(cortexes.cluster)
    back_after = 0.0
    with (
        Load(cortexes.url(1), MODEL, clients=3) as other,
        Load(cortexes.url(0), MODEL, clients=3) as doomed,
    ):
        other.wait_for(8)
        doomed.wait_for(4)
        if kill:
            killed.popen.send_signal(signal.SIGKILL)
            killed.popen.wait(10)
            other.wait_for(8)  # the other serves on while this one is down
            restarted = time.monotonic()
            cortexes.start(0)  # as systemd would, on the same port
            back_after = time.monotonic() - restarted
            doomed.wait_for(4)
        other.wait_for(8)
    summary = other.summary()
    own = doomed.summary()
    print(f"\ntwo cortexes ({'one killed and restarted' if kill else 'control'}): the other "
          f"{summary}; the killed one's own {own}; serving again {back_after:.1f} s after "
          f"its restart; replicas {pids} -> {_pids(cortexes.cluster)}")  # fmt: skip
    assert summary["failed_before_first_token"] == 0 and summary["failed_mid_stream"] == 0
    # The other instance's load waited for 8 requests at each step: twice, or
    # three times with the kill (the doomed load's waits add none of its own).
    assert summary["completed"] == summary["requests"] >= (24 if kill else 16)
    assert _pids(cortexes.cluster) == pids  # no replica reloaded
    if kill:  # the restarted instance serves again
        last = doomed.outcomes[-4:]
        assert all(o.finished for o in last), last
