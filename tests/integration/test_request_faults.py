"""Faults a request or a neuron causes, with a cortex in front of simulated
neurons (real processes, gRPC between them):

- a ~5 MB chat request gets a clear 4xx, every neuron stays ready and the
  next request succeeds (the request's own error is not the neuron's);
- one neuron of three failing every request with INTERNAL is ejected, takes
  no more requests until its probation, and clients see no failure;
- a client that disconnects, at any point of any endpoint, ends the work in
  the engine within a second (a background response keeps running);
- a SIGSTOPped neuron is noticed within seconds: requests not yet started
  move to another replica, a stream already started ends with its terminal
  error event.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from harness.gateway import Sim, sim_gateway
from harness.polling import wait_until
from harness.procs import Proc, cortex_metric, engine_load

# Deadlines of seconds and health checks of half a second: in make test's
# lanes the other lane waits meanwhile (beside a vLLM prefill, healthy sim
# neurons missed their health checks and a sim neuron took over 30 s to start).
pytestmark = pytest.mark.quiet

MODEL = "sim-model"


@dataclass
class Fleet:
    base_url: str
    admin_url: str
    neurons: list[str]  # gRPC addresses
    procs: list[Proc]  # the neurons' processes, in the order of `neurons`

    def running(self) -> int:
        """Requests in flight in the neurons' engines (their Load RPC)."""
        return sum(engine_load(a).running for a in self.neurons)

    def metric(self, name: str, **labels: str) -> float:
        """One sample of cortex's /metrics (0 when absent)."""
        return cortex_metric(self.admin_url, name, **labels)

    def up(self) -> list[bool]:
        """Each neuron's readiness as cortex sees it."""
        return [self.metric("neuraxis_replica_up", replica=a) == 1.0 for a in self.neurons]

    def routed(self, address: str) -> float:
        return self.metric("neuraxis_routing_decisions_total", model=MODEL, replica=address)


@contextmanager
def _fleet(logs_dir: Path, name: str, neuron_args: list[tuple[str, list[str]]]) -> Iterator[Fleet]:
    """cortex in front of one sim neuron per entry of `neuron_args` (the
    model it serves, its extra flags)."""
    sims = [Sim(served_id, extra) for served_id, extra in neuron_args]
    with sim_gateway(logs_dir, name, "--model", MODEL, sims=sims) as running:
        neurons = running.neurons
        fleet = Fleet(
            running.base_url,
            running.admin_url,
            [n.address for n in neurons],
            [n.proc for n in neurons],
        )
        assert wait_until(lambda: all(fleet.up()), 30), fleet.up()
        yield fleet


# Stands in for a model whose output is held back (auto tool choice) or a
# request queued in the engine: nothing reaches cortex for a long while.
HELD = "sim-held"


@pytest.fixture(scope="module")
def fleet(logs_dir: Path) -> Iterator[Fleet]:
    """Three healthy neurons of MODEL, slow enough to be caught
    mid-generation, and one of HELD whose first token takes a minute."""
    timing = ["--sim-ttft-s", "0.05", "--sim-itl-s", "0.02"]
    held = ["--sim-ttft-s", "60"]
    neurons = [(MODEL, timing), (MODEL, timing), (MODEL, timing), (HELD, held)]
    with _fleet(logs_dir, "faults", neurons) as running:
        yield running


@pytest.fixture(scope="module")
def one_failing(logs_dir: Path) -> Iterator[Fleet]:
    """Three neurons of MODEL; the last fails every request at once with INTERNAL."""
    failing = ["--sim-ttft-s", "0", "--sim-fail-after-tokens", "0"]
    with _fleet(logs_dir, "ejection", [(MODEL, []), (MODEL, []), (MODEL, failing)]) as running:
        yield running


def _chat(content: str, **extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


# --- the 5 MB request -----------------------------------------------------------


def test_a_5mb_request_gets_a_4xx_and_every_neuron_stays_ready(fleet: Fleet) -> None:
    huge = "word " * (5 * 1024 * 1024 // 5)  # ~5 MB, far past the model's context
    started = time.monotonic()
    r = httpx.post(f"{fleet.base_url}/v1/chat/completions", json=_chat(huge), timeout=60)
    took = time.monotonic() - started
    print(f"\n5 MB request: HTTP {r.status_code} in {took:.2f} s: {r.text[:200]}")
    assert 400 <= r.status_code < 500, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] in ("context_length_exceeded", "request_too_large")
    assert all(fleet.up())
    assert fleet.metric("neuraxis_retries_total") == 0
    ok = httpx.post(f"{fleet.base_url}/v1/chat/completions", json=_chat("hi"), timeout=30)
    assert ok.status_code == 200, ok.text


# --- outlier ejection ----------------------------------------------------------------


def test_a_neuron_failing_with_internal_is_ejected_and_clients_see_no_failure(
    one_failing: Fleet,
) -> None:
    fleet, bad = one_failing, one_failing.neurons[2]
    url = f"{fleet.base_url}/v1/chat/completions"
    statuses: list[int] = []
    with httpx.Client(timeout=30) as client:
        # Until ejected (5 failures in a row by default), each failure is
        # retried on a healthy neuron. Prompts differ, as clients' do: the
        # default policy (prefix_affinity) keeps a repeated prompt on the
        # neuron that last served it, which after a retry is a healthy one.
        deadline = time.monotonic() + 60
        while fleet.metric("neuraxis_replica_ejections_total", replica=bad) < 1:
            assert time.monotonic() < deadline, "never ejected"
            prompt = f"question {len(statuses)}"
            statuses.append(client.post(url, json=_chat(prompt)).status_code)
        before = len(statuses)
        routed_at_ejection = fleet.routed(bad)
        with ThreadPoolExecutor(4) as pool:
            after = list(
                pool.map(lambda _: client.post(url, json=_chat("hi")).status_code, range(60))
            )
    statuses += after
    taken = fleet.routed(bad) - routed_at_ejection
    total = sum(fleet.routed(a) for a in fleet.neurons)
    failures = sum(1 for s in statuses if s != 200)
    print(
        f"\nINTERNAL neuron: ejected after {before} requests "
        f"({routed_at_ejection:.0f} routed to it); "
        f"after ejection it took {taken:.0f} of {len(after)} requests (share "
        f"{taken / len(after):.2f}); client-visible failures {failures} of {len(statuses)}; "
        f"attempts routed in all {total:.0f}"
    )
    assert taken == 0
    assert failures == 0


# --- client disconnects ----------------------------------------------------------------


def _open(fleet: Fleet, path: str, body: dict[str, object]) -> socket.socket:
    """A raw HTTP/1.1 POST, sent; the caller reads what it likes and closes."""
    host, port = fleet.base_url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    sock.sendall(head.encode() + payload)
    return sock


def _read_until(sock: socket.socket, marker: bytes, count: int) -> None:
    seen = b""
    while seen.count(marker) < count:
        chunk = sock.recv(65536)
        assert chunk, seen[-500:]
        seen += chunk


def _read_to_end(sock: socket.socket) -> bytes:
    """The rest of one HTTP/1.1 response: to its Content-Length, or to the
    last chunk of a chunked (streamed) body."""
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep and b"chunked" not in head.lower():
            length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
            if length and len(body) >= int(length.group(1)):
                return data
        if data.endswith(b"0\r\n\r\n"):
            return data
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def _disconnect_cancels(fleet: Fleet, sock: socket.socket, label: str) -> float:
    """Close the client's connection once the engine is generating; return
    how long until no request runs in any engine."""
    assert wait_until(lambda: fleet.running() >= 1, 10), f"{label}: never reached the engine"
    closed = time.monotonic()
    sock.close()
    assert wait_until(lambda: fleet.running() == 0, 5), f"{label}: the engine kept generating"
    took = time.monotonic() - closed
    print(f"\ndisconnect → engine cancel, {label}: {took * 1000:.0f} ms")
    return took


@pytest.mark.parametrize(
    ("label", "path", "body", "marker", "count"),
    [
        (
            "chat streamed, mid-stream",
            "/v1/chat/completions",
            _chat("hi", max_tokens=1000, stream=True),
            b"data:",
            3,
        ),
        ("chat, non-streamed", "/v1/chat/completions", _chat("hi", max_tokens=1000), b"", 0),
        (
            "completions, non-streamed",
            "/v1/completions",
            {"model": MODEL, "prompt": "hi", "max_tokens": 1000},
            b"",
            0,
        ),
        (
            "completions streamed, mid-stream",
            "/v1/completions",
            {"model": MODEL, "prompt": "hi", "max_tokens": 1000, "stream": True},
            b"data:",
            3,
        ),
        (
            "responses streamed, mid-stream",
            "/v1/responses",
            {"model": MODEL, "input": "hi", "max_output_tokens": 1000, "stream": True},
            b"output_text.delta",
            3,
        ),
        (
            "responses, non-streamed",
            "/v1/responses",
            {"model": MODEL, "input": "hi", "max_output_tokens": 1000},
            b"",
            0,
        ),
        (
            "chat streamed, before the first token",
            "/v1/chat/completions",
            {**_chat("hi", stream=True), "model": HELD},
            b"",
            0,
        ),
        (
            "chat, before the first token",
            "/v1/chat/completions",
            {**_chat("hi"), "model": HELD},
            b"",
            0,
        ),
        (
            "responses streamed, output held back",
            "/v1/responses",
            {"model": HELD, "input": "hi", "stream": True},
            b"",
            0,
        ),
    ],
)
def test_a_client_that_disconnects_cancels_the_engine_within_a_second(
    fleet: Fleet, label: str, path: str, body: dict[str, object], marker: bytes, count: int
) -> None:
    assert wait_until(lambda: fleet.running() == 0, 10)
    sock = _open(fleet, path, body)
    if count:
        _read_until(sock, marker, count)
    assert _disconnect_cancels(fleet, sock, label) < 1.0


def test_a_background_response_keeps_running_when_its_creator_leaves(fleet: Fleet) -> None:
    assert wait_until(lambda: fleet.running() == 0, 10)
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 100, "background": True}
    sock = _open(fleet, "/v1/responses", body)
    answer = _read_to_end(sock)  # headers and body may come in two reads
    sock.close()
    response_id = json.loads(answer.split(b"\r\n\r\n", 1)[1])["id"]
    url = f"{fleet.base_url}/v1/responses/{response_id}"
    running = ("queued", "in_progress")
    assert wait_until(lambda: httpx.get(url, timeout=10).json()["status"] not in running, 30)
    stored = httpx.get(url, timeout=10).json()
    # Generated to its end: all its max_output_tokens.
    assert stored["status"] == "incomplete", stored
    assert stored["incomplete_details"] == {"reason": "max_output_tokens"}
    assert stored["usage"]["output_tokens"] == 100


# --- a hung (SIGSTOPped) neuron ---------------------------------------------------------


@contextmanager
def _stopped(proc: Proc) -> Iterator[None]:
    os.kill(proc.popen.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.popen.pid, signal.SIGCONT)


def _busy_neuron(fleet: Fleet) -> int:
    """The index of the neuron with a request running."""
    busy = [i for i, a in enumerate(fleet.neurons) if engine_load(a).running]
    assert len(busy) == 1, busy
    return busy[0]


def _all_back(fleet: Fleet) -> None:
    assert wait_until(lambda: all(fleet.up()), 30), fleet.up()
    assert wait_until(lambda: fleet.running() == 0, 10)


def test_requests_sent_to_a_hung_neuron_move_to_another(fleet: Fleet) -> None:
    _all_back(fleet)
    url = f"{fleet.base_url}/v1/chat/completions"
    with _stopped(fleet.procs[0]), httpx.Client(timeout=60) as client:
        started = time.monotonic()

        def one(_: int) -> tuple[int, float]:
            r = client.post(url, json=_chat("hi", max_tokens=5))
            return r.status_code, time.monotonic() - started

        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(one, range(6)))
    slowest = max(t for _, t in results)
    print(f"\nSIGSTOP before the first token: {[s for s, _ in results]}, slowest {slowest:.2f} s")
    assert all(s == 200 for s, _ in results)
    assert slowest < 5
    _all_back(fleet)


@pytest.mark.parametrize("streamed", [True, False])
def test_a_request_started_on_a_hung_neuron_ends_with_an_error(
    fleet: Fleet, streamed: bool
) -> None:
    _all_back(fleet)
    body = _chat("hi", max_tokens=1000, stream=streamed)
    firsts = fleet.metric("neuraxis_time_to_first_token_seconds_count", api="chat")
    sock = _open(fleet, "/v1/chat/completions", body)
    if streamed:
        _read_until(sock, b"data:", 3)
    else:  # cortex has had its first token (not yet any for the client)
        ttft = "neuraxis_time_to_first_token_seconds_count"
        assert wait_until(lambda: fleet.metric(ttft, api="chat") > firsts, 10)
    busy = fleet.procs[_busy_neuron(fleet)]
    with _stopped(busy):
        stopped = time.monotonic()
        rest = _read_to_end(sock)
        took = time.monotonic() - stopped
    sock.close()
    kind = "streamed" if streamed else "non-streamed"
    print(f"\nSIGSTOP mid-request ({kind}): ended after {took:.2f} s")
    assert took < 5
    if streamed:
        assert b'"error"' in rest and b"data: [DONE]" in rest
    else:
        assert rest.startswith(b"HTTP/1.1 503") or b" 503 " in rest.split(b"\r\n")[0], rest[:300]
    _all_back(fleet)
