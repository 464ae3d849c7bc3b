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
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray

from harness.figures import recorded_figures
from harness.sim_cluster import SimCluster, ready_sim_cluster, two_replica_spec
from harness.sim_specs import pinned_replica_spec
from harness.streaming_load import Load, Outcome, stream_once

MODEL = "sim-ada-plus"
SPEC = (
    two_replica_spec(MODEL)
    # No hopper node in this cluster.
    + pinned_replica_spec("sim-hopper", "hopper")
    # Ampere has no FP8 KV cache.
    + pinned_replica_spec("fp8-on-ampere", "ampere", 'kv_cache_dtype = "fp8"')
)


@pytest.fixture(scope="module")
def ray_cluster(logs_dir: Path) -> Iterator[SimCluster]:
    with ready_sim_cluster(SPEC, logs_dir, MODEL) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def figures(logs_dir: Path) -> Iterator[dict[str, Any]]:
    """Failover figures, written to the logs directory for the notes."""
    with recorded_figures(logs_dir / "cluster-failover.json") as found:
        yield found


def assert_no_unstarted_request_failed(load: Load) -> None:
    """The failover contract: a request that had received nothing was retried
    on another replica; one cut after its first token ended with an error
    event and [DONE], never a hang or a bare disconnect."""
    unstarted = [o for o in load.outcomes if not o.finished and not o.first_token]
    assert not unstarted, Counter(f"{o.status} {o.error}" for o in unstarted).most_common(5)
    cut = [o for o in load.outcomes if not o.finished]
    assert all(o.first_token and o.error and o.done for o in cut), cut


# -- the tests ---------------------------------------------------------------


def test_replicas_are_placed_only_on_ada_or_newer(ray_cluster: SimCluster) -> None:
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


def test_unsatisfiable_specs_are_reported_not_retried(ray_cluster: SimCluster) -> None:
    hopper = ray_cluster.model("sim-hopper")
    assert hopper["unplaceable"] == (
        "no node of generation hopper in the cluster (generations present: ada, ampere, blackwell)"
    )
    fp8 = ray_cluster.model("fp8-on-ampere")
    assert "KV-cache dtype 'fp8' is not available on ampere" in fp8["unplaceable"]
    # No actor was ever created for them, however many passes went by.
    passes = ray_cluster.status()["passes"]
    deadline = time.monotonic() + 60
    while ray_cluster.status()["passes"] < passes + 3:
        assert time.monotonic() < deadline, "the controller made no pass for 60 s"
        time.sleep(0.1)
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
    ray_cluster: SimCluster, logs_dir: Path
) -> None:
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", "status", "--address", ray_cluster.address],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    (logs_dir / "cluster-status.txt").write_text(text)
    print(text)
    for generation in ("ampere", "ada", "blackwell"):
        assert f"  {generation}  " in text
    assert any(line.split()[:2] == [MODEL, "2/2"] for line in text.splitlines())
    assert "UNPLACEABLE" in text and "no node of generation hopper" in text
    as_json = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuraxis.cli",
            "status",
            "--address",
            ray_cluster.address,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    data = json.loads(as_json.stdout)
    assert {n["generation"] for n in data["nodes"]} >= {"ampere", "ada", "blackwell"}


_CLI_WITH_SIGINT = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from neuraxis.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_status_shows_current_in_flight_counts_and_watch_refreshes(
    ray_cluster: SimCluster, logs_dir: Path
) -> None:
    """A long stream shows in cortex's count (reported to the controller)
    and in the engine's running count; `--watch` prints fresh rounds until
    interrupted, and exits 0 on Ctrl-C."""
    results: list[Outcome] = []

    def one() -> None:
        with httpx.Client(base_url=ray_cluster.base_url, timeout=60) as client:
            results.append(stream_once(client, MODEL, max_tokens=600))  # ~12 s

    streamer = threading.Thread(target=one)
    streamer.start()
    deadline = time.monotonic() + 15
    seen: tuple[int, int] = (0, 0)
    while time.monotonic() < deadline and seen < (1, 1):
        status = ray_cluster.status()
        replicas = next(m for m in status["models"] if m["id"] == MODEL)["replicas"]
        seen = (
            sum(r["cortex_in_flight"] or 0 for r in replicas),
            sum(r["engine_running"] or 0 for r in replicas),
        )
        time.sleep(0.2)
    assert seen >= (1, 1), status
    assert [c["in_flight"] for c in status["cortices"]] == [1]
    # Output to files, read while it runs: Ctrl-C goes once two rounds are
    # out, however long the driver's start-up takes on a loaded machine.
    out_path, err_path = (
        logs_dir / "cluster-status-watch.txt",
        logs_dir / "cluster-status-watch.err",
    )
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        watcher = subprocess.Popen(
            # Python turns SIGINT into KeyboardInterrupt only when it starts
            # with SIGINT at its default: a test run started in the background
            # by a non-interactive shell ignores SIGINT, and so would the
            # watcher, which then never ends on Ctrl-C (both failures of this
            # test had that cause). So the watcher sets the handler itself, as
            # a terminal's `neuraxis status --watch` has it.
            [
                sys.executable,
                "-c",
                _CLI_WITH_SIGINT,
                "status",
                "--address",
                ray_cluster.address,
                "--watch",
                "0.5",
            ],
            stdout=out_file,
            stderr=err_file,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and watcher.poll() is None:
            if out_path.read_text().count("neuraxis status, every 0.5s") >= 2:
                break
            time.sleep(0.2)
    finally:
        watcher.send_signal(signal.SIGINT)
        try:
            watcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
            raise
    out, err = out_path.read_text(), err_path.read_text()
    assert watcher.returncode == 0, err[-2000:]
    assert out.count("neuraxis status, every 0.5s") >= 2, out
    assert "CORTEX" in out and "Traceback" not in err, err[-2000:]
    streamer.join(timeout=60)
    assert results and results[0].finished, results


# The failover tests are quiet. In one CI run of make test, 443 of 491
# requests were refused before their first token while the crashed neuron was
# replaced; alone or beside busy loops they all pass. The cortex log was
# overwritten by the next module's, so the cause is a guess: most likely the
# surviving replica missed its 1 s Info polls beside the other lane's vLLM
# prefill, as tests/faults' sim neurons did, leaving no ready replica.
quiet = pytest.mark.quiet


def _failover_under_load(
    cluster: SimCluster,
    figures: dict[str, Any],
    name: str,
    victim: dict[str, Any],
    fail: Callable[[], None],
    max_tokens: int = 10,
    delay_s: float = 0.0,
) -> dict[str, Any]:
    """Four clients stream without pause; `fail` breaks `victim` after 8
    requests (and `delay_s`); wait for the replacement and 8 more requests.
    Checks the failover contract and returns the controller's record."""
    with Load(cluster.base_url, MODEL, clients=4, max_tokens=max_tokens) as load:
        load.wait_for(8)
        time.sleep(delay_s)
        fail()
        failover = cluster.wait_for_failover(victim["id"])
        cluster.wait_ready(MODEL, 2)
        load.wait_for(8)
    figures[name] = {**load.summary(), "seconds_to_ready": failover["seconds_to_ready"]}
    print(f"{name}:", figures[name])
    assert_no_unstarted_request_failed(load)
    assert load.summary()["completed"] >= 16
    return failover


@quiet
def test_a_killed_replica_is_replaced_and_no_unstarted_request_fails(
    ray_cluster: SimCluster, figures: dict[str, Any]
) -> None:
    victim = ray_cluster.ready(MODEL)[0]
    actor = ray.get_actor(victim["id"], namespace="neuraxis")
    failover = _failover_under_load(
        ray_cluster, figures, "actor_killed", victim, lambda: ray.kill(actor)
    )
    replacement = next(r for r in ray_cluster.ready(MODEL) if r["id"] == failover["replacement"])
    assert ray_cluster.generation_of(replacement["node_id"]) in ("ada", "blackwell")


@quiet
def test_a_crashed_neuron_is_replaced_and_cut_streams_end_with_an_error_event(
    ray_cluster: SimCluster, figures: dict[str, Any]
) -> None:
    victim = ray_cluster.ready(MODEL)[0]
    # The engine process dies at once, mid-way through streams of ~0.85 s.
    failover = _failover_under_load(
        ray_cluster,
        figures,
        "neuron_killed",
        victim,
        lambda: os.kill(victim["pid"], signal.SIGKILL),
        max_tokens=40,
        delay_s=0.4,
    )
    assert "exited" in failover["reason"]


@quiet
def test_a_lost_node_is_replaced_elsewhere_and_no_unstarted_request_fails(
    ray_cluster: SimCluster, figures: dict[str, Any]
) -> None:
    ready = ray_cluster.ready(MODEL)
    victim = next(r for r in ready if ray_cluster.generation_of(r["node_id"]) == "ada")
    _failover_under_load(
        ray_cluster,
        figures,
        "node_removed",
        victim,
        lambda: ray_cluster.cluster.remove_node(ray_cluster.nodes["ada"]),
    )
    # Both replicas now on the blackwell node: the only eligible one left.
    generations = [ray_cluster.generation_of(r["node_id"]) for r in ray_cluster.ready(MODEL)]
    assert generations == ["blackwell", "blackwell"]
    dead = [n for n in ray_cluster.status()["nodes"] if not n["alive"]]
    assert [n["generation"] for n in dead] == ["ada"]


def _apply(cluster: SimCluster, spec: str, path: Path) -> None:
    """`neuraxis cluster apply`: the operator's way to change the spec."""
    path.write_text(spec)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuraxis.cli",
            "cluster",
            "apply",
            str(path),
            "--address",
            cluster.address,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]


def test_scaling_down_drains_in_flight_streams(ray_cluster: SimCluster, logs_dir: Path) -> None:
    results: list[Outcome] = []

    def one() -> None:
        with httpx.Client(base_url=ray_cluster.base_url, timeout=60) as client:
            results.append(stream_once(client, MODEL, max_tokens=100))  # ~2 s each

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
    assert len(busy) == 2
    smaller = SPEC.replace("replicas = 2", "replicas = 1", 1)
    _apply(ray_cluster, smaller, logs_dir / "cluster-deployment-1.toml")
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 6
    assert all(o.finished and o.error is None for o in results), results
    ray_cluster.wait_ready(MODEL, 1)
    _apply(ray_cluster, SPEC, logs_dir / "cluster-deployment-2.toml")
    ray_cluster.wait_ready(MODEL, 2)
