"""Failover benchmark: a three-node Ray cluster on this machine (ampere, ada,
blackwell; logical GPUs), two replicas of a simulated model allowed on ada
or newer, and four clients streaming through cortex without pause. Each
trial breaks one replica (its Ray actor killed, its neuron process
SIGKILLed, or its whole node removed) and measures the time from the failure
to the replacement being ready, and what the clients saw.

Baseline, same run: the clients' throughput before any failure; the ratio is
the throughput of the requests that started during failover windows.

    make bench-failover
    python -m bench.failover --smoke    # one trial, seconds of load (make test)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import ray

from harness.sim_cluster import SimCluster, sim_cluster, two_replica_spec
from harness.streaming_load import Load

MODEL = "sim"
SPEC = two_replica_spec(MODEL)
CLIENTS = 4
MAX_TOKENS = 20  # ~0.45 s a request
TRIALS = {"actor killed": 4, "neuron SIGKILLed": 4, "node removed": 2}
BASELINE_S = 10.0
# --smoke: one trial of one kind after a short baseline; proves the benchmark
# runs, measures nothing.
SMOKE_TRIALS = {"actor killed": 1}
SMOKE_BASELINE_S = 2.0


def break_one(cluster: SimCluster, how: str) -> str:
    """Break a replica; return its id."""
    ready = cluster.ready(MODEL)
    if how == "node removed":
        victim = ready[0]
        where = [(r["id"], r["node_id"][:8], cluster.generation_of(r["node_id"])) for r in ready]
        print(f"node removal: replicas on {where}; removing {victim['node_id'][:8]}")
        generation = cluster.generation_of(victim["node_id"])
        assert generation is not None
        cluster.cluster.remove_node(cluster.nodes.pop(generation))
        cluster.add_node(generation)  # a new host of the same generation joins
    elif how == "actor killed":
        victim = ready[0]
        ray.kill(ray.get_actor(victim["id"], namespace="neuraxis"))
    else:
        victim = ready[0]
        os.kill(victim["pid"], signal.SIGKILL)
    return str(victim["id"])


def settle(cluster: SimCluster, timeout: float = 60) -> float:
    """Wait until the two replicas are on different nodes again (the
    controller moves one off a node that holds both); return how long."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        ready = cluster.ready(MODEL)
        apart = len(ready) == 2 and len({r["node_id"] for r in ready}) == 2
        if apart and len(cluster.model(MODEL)["replicas"]) == 2:
            break
        time.sleep(0.2)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__)
    cli.add_argument("--smoke", action="store_true", help="one trial (make test)")
    smoke = cli.parse_args(argv).smoke
    trials = SMOKE_TRIALS if smoke else TRIALS
    baseline_s = SMOKE_BASELINE_S if smoke else BASELINE_S
    work = Path(tempfile.mkdtemp(prefix="neuraxis-bench-failover-"))
    rows: list[dict[str, Any]] = []
    with sim_cluster(SPEC, work, wait_for_model=MODEL) as cluster:
        cluster.wait_ready(MODEL, 2)
        with Load(cluster.base_url, MODEL, CLIENTS, MAX_TOKENS) as load:
            time.sleep(2)  # warm up
            t0 = time.monotonic()
            time.sleep(baseline_s)
            steady = load.summary(since=t0)
            steady_rate = steady["completed"] / (time.monotonic() - t0)
            for how, count in trials.items():
                for _ in range(count):
                    time.sleep(0.2)  # mid-way through some streams
                    started = time.monotonic()
                    lost = break_one(cluster, how)
                    failover = cluster.wait_for_failover(lost)
                    cluster.wait_ready(MODEL, 2)
                    window = time.monotonic() - started
                    load.wait_for(CLIENTS)  # requests begun in the window end
                    seen = load.summary(since=started, until=started + window)
                    settled = settle(cluster)
                    rows.append(
                        {
                            "how": how,
                            "seconds_to_ready": failover["seconds_to_ready"],
                            "window_s": window,
                            "settle_s": settled,
                            **seen,
                        }
                    )
                    time.sleep(1)
    print(
        f"\nbaseline: {steady['completed']} requests completed in {baseline_s:.0f} s "
        f"({steady_rate:.1f}/s), {steady['requests'] - steady['completed']} failed"
    )
    print(
        "\n| failure | trials | time to replacement ready (s), median [max] "
        "| requests | failed before first token | cut mid-stream (error event) "
        "| throughput vs baseline | back on separate nodes after (s), max |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for how in trials:
        mine = [r for r in rows if r["how"] == how]
        ready = [r["seconds_to_ready"] for r in mine]
        requests = sum(r["requests"] for r in mine)
        rate = sum(r["completed"] for r in mine) / sum(r["window_s"] for r in mine)
        print(
            f"| {how} | {len(mine)} | {statistics.median(ready):.2f} [{max(ready):.2f}] "
            f"| {requests} | {sum(r['failed_before_first_token'] for r in mine)} "
            f"| {sum(r['failed_mid_stream'] for r in mine)} | {rate / steady_rate:.0%} "
            f"| {max(r['settle_s'] for r in mine):.1f} |"
        )


if __name__ == "__main__":
    main()
