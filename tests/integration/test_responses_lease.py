"""Leases of running responses on real processes (a slow sim neuron, two
cortex instances sharing one SQLite store): the cortex running a background
response is killed with SIGKILL; the other marks it failed once the lease
has expired, and a replay (`?stream=true`) on the other ends with
response.failed instead of polling forever. A DELETE of a running
response (background, or streamed and stored: its stream ends with
response.failed) stops its generation and it never comes back."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.gateway import Sim, cortex, sim_neurons
from harness.procs import Proc, engine_load

MODEL = "sim-lease"
LEASE_S = 3
DEADLINE_S = 30


@pytest.fixture(scope="module")
def neuron(logs_dir: Path) -> Iterator[str]:
    """One sim neuron for the module: each test leaves it idle (_wait_idle)."""
    with sim_neurons(logs_dir, "lease", [Sim(MODEL, ["--sim-itl-s", "0.05"])]) as (running,):
        yield running.address


def _cortex(neuron: str, state: Path, log: Path) -> tuple[Proc, str]:
    args = ["--state-dir", str(state), "--responses-lease-s", str(LEASE_S)]
    started = cortex(log, [neuron], *args)
    started.wait_ready(f"/v1/models/{MODEL}")
    return started.proc, started.base_url


@pytest.fixture(scope="module")
def gateway(neuron: str, logs_dir: Path) -> Iterator[str]:
    """One cortex for the delete tests (each deletes what it made)."""
    proc, base = _cortex(neuron, logs_dir / "delete-state", logs_dir / "delete-cortex.log")
    try:
        yield base
    finally:
        proc.stop()


def _background(base: str) -> str:
    body = {"model": MODEL, "input": "Hi", "background": True, "max_output_tokens": 2000}
    r = httpx.post(f"{base}/v1/responses", json=body, timeout=30)
    r.raise_for_status()
    response_id = str(r.json()["id"])
    deadline = time.monotonic() + DEADLINE_S
    while httpx.get(f"{base}/v1/responses/{response_id}").json()["status"] != "in_progress":
        assert time.monotonic() < deadline, "never in progress"
        time.sleep(0.1)
    return response_id


def _replay(base: str, response_id: str) -> list[dict[str, Any]]:
    url = f"{base}/v1/responses/{response_id}?stream=true"
    with httpx.stream("GET", url, timeout=DEADLINE_S) as r:
        return [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: ")]


def _wait_idle(neuron: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while engine_load(neuron).running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine_load(neuron).running == 0


def test_a_killed_instances_run_fails_on_another_after_its_lease(
    neuron: str, logs_dir: Path
) -> None:
    state = logs_dir / "lease-state"
    first, base = _cortex(neuron, state, logs_dir / "lease-cortex-1.log")
    try:
        second, other = _cortex(neuron, state, logs_dir / "lease-cortex-2.log")
    except BaseException:
        first.stop()
        raise
    try:
        response_id = _background(base)
        first.stop(signal.SIGKILL)
        killed = time.monotonic()
        events = _replay(other, response_id)
        waited = time.monotonic() - killed
        assert events[-1]["type"] == "response.failed"
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        record = httpx.get(f"{other}/v1/responses/{response_id}").json()
        assert record["status"] == "failed" and "lease" in record["error"]["message"]
        assert waited < LEASE_S + DEADLINE_S / 3, waited
    finally:
        second.stop()
        first.stop()
    _wait_idle(neuron)  # the killed instance's generation is aborted


def test_delete_of_a_running_background_response_stops_it(neuron: str, gateway: str) -> None:
    response_id = _background(gateway)
    assert engine_load(neuron).running == 1
    r = httpx.delete(f"{gateway}/v1/responses/{response_id}")
    assert r.status_code == 200 and r.json()["deleted"] is True
    _wait_idle(neuron)  # the generation was aborted, and the run ended unstored
    assert httpx.get(f"{gateway}/v1/responses/{response_id}").status_code == 404


def test_delete_of_a_streaming_stored_response_stops_it(neuron: str, gateway: str) -> None:
    body = {"model": MODEL, "input": "Hi", "stream": True, "max_output_tokens": 2000}
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{gateway}/v1/responses", json=body, timeout=DEADLINE_S) as r:
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
            if len(events) == 10:
                response_id = events[0]["response"]["id"]
                deleted = httpx.delete(f"{gateway}/v1/responses/{response_id}")
                assert deleted.status_code == 200
                break
        events += [json.loads(x[6:]) for x in lines if x.startswith("data: ")]
    assert events[-1]["type"] == "response.failed"
    assert "deleted" in events[-1]["response"]["error"]["message"]
    _wait_idle(neuron)
    assert httpx.get(f"{gateway}/v1/responses/{response_id}").status_code == 404
