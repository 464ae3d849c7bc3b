"""The batched token stream end to end (`--pool-token-stream batched`): a
cortex and sim neurons as real processes, one Session stream between cortex
and each neuron instead of a Generate call per request (issue 29 point 1):

- concurrent streams share it, each with its own text and length;
- a client that disconnects ends its request in the engine at once;
- one request failing in the engine ends that request only;
- a neuron killed mid-stream ends every stream it carried with a terminal
  error event, and the requests that follow are served by the other one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from harness.gateway import Sim, SimGateway, SimNeuron, sim_gateway
from harness.polling import wait_until
from harness.procs import cortex_metric, engine_load
from harness.streamed_chat import StreamedChat, read_sync

pytestmark = pytest.mark.quiet

MODEL = "sim-model"
FAIL_AFTER = 30  # tokens: a longer request fails in the engine
BATCHED = ["--model", MODEL, "--pool-token-stream", "batched"]
# Short health checks and deadlines, as the fault suite's: a killed neuron
# shows in a second.
FAST = ["--health-timeout-s", "0.5", "--poll-interval-s", "0.25", "--idle-timeout-s", "2"]
IDLE_S = 2.0
CHAT = "/v1/chat/completions"


def _chat(max_tokens: int, content: str = "hello") -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
    }


def _stream(base_url: str, max_tokens: int) -> StreamedChat:
    with httpx.Client(base_url=base_url, timeout=60) as client:
        return read_sync(client, CHAT, _chat(max_tokens))


def _up(gateway: SimGateway) -> bool:
    return all(
        cortex_metric(gateway.admin_url, "neuraxis_replica_up", replica=n.address) == 1.0
        for n in gateway.neurons
    )


@pytest.fixture(scope="module")
def gateway(logs_dir: Path) -> Iterator[SimGateway]:
    timing = ["--sim-ttft-s", "0.02", "--sim-itl-s", "0.02"]
    sim = Sim(MODEL, [*timing, "--sim-fail-after-tokens", str(FAIL_AFTER)])
    with sim_gateway(logs_dir, "token-stream", *BATCHED, *FAST, sims=[sim]) as running:
        assert wait_until(lambda: _up(running), 30)
        yield running


def test_concurrent_streams_share_the_session_each_with_its_own_text(
    gateway: SimGateway,
) -> None:
    lengths = [3 + i % 20 for i in range(24)]
    with ThreadPoolExecutor(len(lengths)) as pool:
        seen = list(pool.map(lambda n: _stream(gateway.base_url, n), lengths))
    longest = max(seen, key=lambda s: len(s.text)).text
    for n, stream in zip(lengths, seen, strict=True):
        assert stream.finished, stream
        assert stream.text == longest[:n]  # a request's deltas, none of another's
    log = gateway.neuron.proc.log_path.read_text()
    assert log.count("token stream session opened") == 1, log[-2000:]


def _neuron_metric(neuron: SimNeuron, code: str) -> float:
    base = f"http://127.0.0.1:{neuron.metrics_port}"
    return cortex_metric(base, "neuraxis_neuron_grpc_requests_total", method="Generate", code=code)


def test_a_client_that_disconnects_ends_its_request_in_the_engine(gateway: SimGateway) -> None:
    neuron = gateway.neuron
    cancelled = _neuron_metric(neuron, "CANCELLED")
    host, port = gateway.base_url.removeprefix("http://").split(":")
    payload = json.dumps(_chat(FAIL_AFTER - 1)).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = (
            f"POST {CHAT} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        sock.sendall(head.encode() + payload)
        seen = b""
        while seen.count(b"data:") < 3:
            chunk = sock.recv(65536)
            assert chunk, seen
            seen += chunk
        assert engine_load(neuron.address).running == 1
    gone = time.monotonic()
    assert wait_until(lambda: engine_load(neuron.address).running == 0, 2.0)
    print(f"\nengine idle {time.monotonic() - gone:.3f} s after the client left")
    assert wait_until(lambda: _neuron_metric(neuron, "CANCELLED") == cancelled + 1, 2.0)


def test_a_request_failing_in_the_engine_ends_that_request_only(gateway: SimGateway) -> None:
    lengths = [FAIL_AFTER * 2] * 3 + [10] * 6
    with ThreadPoolExecutor(len(lengths)) as pool:
        seen = list(pool.map(lambda n: _stream(gateway.base_url, n), lengths))
    for stream in seen[:3]:  # past the engine's failure: a terminal error event
        assert stream.error_event is not None and stream.done, stream
        assert len(stream.text) == FAIL_AFTER
    assert all(s.finished for s in seen[3:]), seen[3:]
    assert _stream(gateway.base_url, 5).finished  # the session goes on


def test_a_killed_neuron_ends_its_streams_and_the_next_requests_go_elsewhere(
    logs_dir: Path,
) -> None:
    timing = ["--sim-ttft-s", "0.02", "--sim-itl-s", "0.02"]
    sims = [Sim(MODEL, timing), Sim(MODEL, timing)]
    with sim_gateway(logs_dir, "token-stream-kill", *BATCHED, *FAST, sims=sims) as running:
        assert wait_until(lambda: _up(running), 30)
        with ThreadPoolExecutor(12) as pool:
            streams = [pool.submit(_stream, running.base_url, 200) for _ in range(6)]
            assert wait_until(
                lambda: sum(engine_load(n.address).running for n in running.neurons) == 6, 10
            )
            loads = [engine_load(n.address).running for n in running.neurons]
            victim = running.neurons[loads.index(max(loads))]
            killed_at = time.monotonic()
            os.killpg(victim.proc.popen.pid, signal.SIGKILL)
            after = [pool.submit(_stream, running.base_url, 5) for _ in range(6)]
            seen = [f.result(timeout=60) for f in streams]
            followed = [f.result(timeout=60) for f in after]
        broken = [s for s in seen if not s.finished]
        assert len(broken) == max(loads), seen
        for stream in broken:  # a terminal error event, then [DONE], within the idle bound
            assert stream.error_event is not None and stream.done, stream
            assert stream.ended_at - killed_at < IDLE_S + 3.0, stream
        assert all(s.finished for s in followed), followed
