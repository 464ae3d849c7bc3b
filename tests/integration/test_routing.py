"""Routing through real processes: cortex with `--routing prefix_affinity` in
front of two simulated neurons serving the same model. A Responses chain
(previous_response_id) stays on the replica that served its first turn while
both are healthy, and moves to the other when that replica stops. Which
replica took each request, and why, is read from cortex's own metrics
(neuraxis_routing_policy_decisions_total by replica and decision)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from harness.gateway import Sim, sim_gateway
from harness.procs import Proc
from harness.stacks import strict_client

MODEL = "sim-route"
DECISIONS = "neuraxis_routing_policy_decisions"


@dataclass
class Pair:
    base_url: str
    admin_url: str
    neurons: dict[str, Proc]  # by address

    def client(self) -> OpenAI:
        return strict_client(self.base_url)


@pytest.fixture(scope="module")
def pair(logs_dir: Path) -> Iterator[Pair]:
    args = ["--routing", "prefix_affinity", "--model", MODEL]
    args += ["--poll-interval-s", "0.5", "--state-dir", str(logs_dir / "route-state")]
    with sim_gateway(logs_dir, "route", *args, sims=[Sim(MODEL), Sim(MODEL)]) as running:
        _wait_both_ready(running.admin_url, running.cortex.proc)
        neurons = {n.address: n.proc for n in running.neurons}
        yield Pair(running.base_url, running.admin_url, neurons)


def _wait_both_ready(admin: str, cortex: Proc) -> None:
    """/readyz needs one neuron; the test needs both routable."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        up = [
            s
            for f in text_string_to_metric_families(httpx.get(f"{admin}/metrics").text)
            if f.name == "neuraxis_replica_up"
            for s in f.samples
            if s.value == 1
        ]
        if len(up) == 2:
            return
        time.sleep(0.2)
    raise AssertionError(f"both neurons never ready:\n{cortex.log_tail()}")


def _decisions(admin: str) -> Counter[tuple[str, str]]:
    """Requests routed so far, by (replica, decision)."""
    counts: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(httpx.get(f"{admin}/metrics").text):
        if family.name != DECISIONS:
            continue
        for sample in family.samples:
            if sample.name == f"{DECISIONS}_total" and sample.labels["model"] == MODEL:
                counts[(sample.labels["replica"], sample.labels["decision"])] += int(sample.value)
    return counts


def _turn(pair: Pair, text: str, previous: str | None) -> tuple[str, Counter[tuple[str, str]]]:
    """One turn of the chain: its response id and the routing it caused."""
    before = _decisions(pair.admin_url)
    client = pair.client()
    if previous is None:
        response = client.responses.create(model=MODEL, input=text, max_output_tokens=4)
    else:
        response = client.responses.create(
            model=MODEL, input=text, max_output_tokens=4, previous_response_id=previous
        )
    # The sim engine always writes max_output_tokens, so its answers end
    # "incomplete"; the chain goes on from them all the same.
    assert response.status == "incomplete"
    return response.id, _decisions(pair.admin_url) - before


def test_a_chain_stays_on_its_replica_and_moves_when_it_stops(pair: Pair) -> None:
    first, routed = _turn(pair, "Turn one of a chain.", None)
    ((home, decision),) = routed  # one request, one routing decision
    assert routed[(home, decision)] == 1
    previous = first
    for text in ("Turn two.", "Turn three."):
        previous, routed = _turn(pair, text, previous)
        # The replica that served the previous response, because it did.
        assert routed == Counter({(home, "chain"): 1})

    pair.neurons[home].stop(signal.SIGTERM)
    (other,) = [a for a in pair.neurons if a != home]
    previous, routed = _turn(pair, "Turn four, its replica gone.", previous)
    # Wherever the first attempt went (cortex may not have seen the neuron go
    # yet), the response was served by the other replica.
    assert {replica for replica, _ in routed} <= {home, other}
    assert sum(n for (replica, _), n in routed.items() if replica == other) == 1
    # And the chain now continues there.
    _, routed = _turn(pair, "Turn five.", previous)
    assert routed == Counter({(other, "chain"): 1})
