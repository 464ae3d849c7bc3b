"""Requests cortex routed to each replica, read from its Prometheus text
(neuraxis_routing_decisions_total, summed over the other labels), and the
columns the routing benchmarks' tables share."""

from __future__ import annotations

import re

import httpx

# The columns both routing benchmarks (routing.py with vLLM, routing_sim.py
# with sim farms) lead their tables with, so that the two read alike.
COLUMNS = (
    "workload",
    "policy",
    "TTFT p50 (ms)",
    "TTFT p90 (ms)",
    "output tokens/s",
    "prefix-cache hit rate",
)

_ROUTED = re.compile(r"^neuraxis_routing_decisions_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


_REPLICA = re.compile(r'replica="([^"]*)"')


def routed(admin_url: str) -> dict[str, float]:
    """Requests cortex has routed to each replica so far."""
    return parse_routed(httpx.get(f"{admin_url}/metrics", timeout=10).text)


def parse_routed(metrics: str) -> dict[str, float]:
    """Per replica, the sum of its neuraxis_routing_decisions_total series
    (whatever other labels they carry) in Prometheus text."""
    counts: dict[str, float] = {}
    for line in metrics.splitlines():
        match = _ROUTED.match(line)
        replica = _REPLICA.search(match["labels"]) if match else None
        if match and replica:
            counts[replica[1]] = counts.get(replica[1], 0.0) + float(match["value"])
    return counts
