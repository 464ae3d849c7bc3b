"""What bench/routing_sim.py computes from cortex's metrics: each replica's
requests and share."""

from __future__ import annotations

from harness.routed import parse_routed
from harness.sessions import Cell, Result

METRICS = """\
# HELP neuraxis_routing_decisions_total Requests routed to each replica.
# TYPE neuraxis_routing_decisions_total counter
neuraxis_routing_decisions_total{model="m",replica="a:1"} 3.0
neuraxis_routing_decisions_total{decision="overflow",model="m",replica="b:1"} 1.0
neuraxis_routing_decisions_total{decision="hit",model="m",replica="b:1"} 4.0
neuraxis_routing_decisions_created{model="m",replica="a:1"} 1.7e9
neuraxis_retries_total{model="m",replica="a:1"} 9.0
"""


def test_routed_sums_each_replicas_series() -> None:
    assert parse_routed(METRICS) == {"a:1": 3.0, "b:1": 5.0}


def test_shares_are_relative_to_the_average_and_count_idle_replicas() -> None:
    cell = Cell(Result(), {})
    cell.add(Result(), {"a": 3.0, "b": 1.0})
    cell.add(Result(), {"a": 1.0, "b": 1.0})
    assert cell.shares(["a", "b", "c"]) == [2.0, 1.0, 0.0]
