"""Slow and abusive clients against a real cortex (in front of a simulated
neuron), with short read deadlines and small header limits
(cortex/http/guard.py):

- a client that trickles its headers, or its body, gets 408
  request_timeout in the envelope and is disconnected at the deadline, while
  a normal client is served meanwhile; a connection that sends nothing is
  closed;
- too many headers, or too many header bytes: 431 headers_too_large;
- a streaming client that stops reading holds a bounded amount of cortex's
  memory, a multi-prompt completion too (its streams are merged through a
  bounded queue, so gRPC's flow control holds the neuron back).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from harness.gateway import sim_gateway

MODEL = "sim-slow-clients"
HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
MAX_HEADERS = 20
MAX_HEADER_BYTES = 2048


@dataclass
class Gateway:
    base_url: str
    port: int
    cortex: psutil.Process


@pytest.fixture(scope="module")
def gateway(logs_dir: Path) -> Iterator[Gateway]:
    cortex = ["--model", MODEL, "--request-header-timeout-s", str(HEADER_TIMEOUT_S)]
    cortex += ["--request-body-timeout-s", str(BODY_TIMEOUT_S)]
    cortex += ["--max-header-count", str(MAX_HEADERS)]
    cortex += ["--max-header-bytes", str(MAX_HEADER_BYTES)]
    neuron = ["--sim-ttft-s", "0", "--sim-itl-s", "0"]
    with sim_gateway(
        logs_dir, "slow-clients", *cortex, served_id=MODEL, neuron_flags=neuron
    ) as running:
        process = psutil.Process(running.cortex.proc.popen.pid)
        yield Gateway(running.base_url, running.cortex.port, process)


def _connect(gateway: Gateway) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (the socket's timeout bounds it)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _answer(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"connection: close" in head.lower()
    return status, json.loads(body)


def _trickle(sock: socket.socket, pieces: list[bytes], every_s: float) -> float:
    """Send `pieces` one at a time until the server closes; the time it took."""
    started = time.monotonic()
    for piece in pieces:
        try:
            sock.sendall(piece)
        except OSError:  # closed on us: what the deadline does
            break
        time.sleep(every_s)
    return time.monotonic() - started


def _chat(gateway: Gateway) -> int:
    body = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, timeout=10).status_code


def test_trickled_headers_get_408_at_the_deadline_while_others_are_served(
    gateway: Gateway,
) -> None:
    with _connect(gateway) as sock:
        head = [b"POST /v1/chat/completions HTTP/1.1\r\n"] + [b"x-slow: a\r\n"] * 15
        started = time.monotonic()
        sender = threading.Thread(target=_trickle, args=(sock, head, 0.25))
        sender.start()
        assert _chat(gateway) == 200  # served while the slow client waits
        status, envelope = _answer(_read_all(sock))
        took = time.monotonic() - started
        sender.join()
    print(f"\ntrickled headers: {status} after {took:.2f} s (deadline {HEADER_TIMEOUT_S} s)")
    assert status == 408
    assert envelope["error"]["code"] == "request_timeout"
    assert envelope["error"]["type"] == "invalid_request_error"
    assert HEADER_TIMEOUT_S * 0.9 <= took < HEADER_TIMEOUT_S + 2


def test_a_connection_that_sends_nothing_is_closed(gateway: Gateway) -> None:
    with _connect(gateway) as sock:
        started = time.monotonic()
        assert _read_all(sock) == b""
        took = time.monotonic() - started
    assert HEADER_TIMEOUT_S * 0.9 <= took < HEADER_TIMEOUT_S + 2


def test_a_trickled_body_gets_408_at_the_deadline(gateway: Gateway) -> None:
    body = json.dumps(
        {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "x" * 200}]}
    ).encode()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: cortex\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    )
    with _connect(gateway) as sock:
        sock.sendall(head)
        started = time.monotonic()
        pieces = [body[i : i + 10] for i in range(0, len(body), 10)]
        sender = threading.Thread(target=_trickle, args=(sock, pieces, 0.2))
        sender.start()
        status, envelope = _answer(_read_all(sock))
        took = time.monotonic() - started
        sender.join()
    print(f"\ntrickled body: {status} after {took:.2f} s (deadline {BODY_TIMEOUT_S} s)")
    assert (status, envelope["error"]["code"]) == (408, "request_timeout")
    assert BODY_TIMEOUT_S * 0.9 <= took < BODY_TIMEOUT_S + 2
    assert _chat(gateway) == 200


def test_a_refused_client_still_sending_reads_its_answer(gateway: Gateway) -> None:
    # A head past the limits followed by a large body: cortex refuses after
    # its first read, with most of the body still unread in its socket.
    # Closing a socket with unread input makes the kernel reset the
    # connection and drop the answer not yet sent; the close must linger.
    headers = b"".join(b"x-h%d: v\r\n" % i for i in range(MAX_HEADERS + 1))
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: cortex\r\n%s"
        b"content-length: 4000000\r\n\r\n%s" % (headers, b"x" * 4_000_000)
    )
    for _ in range(10):  # a race (the reset against the read): tried ten times
        with _connect(gateway) as sock:
            sender = threading.Thread(target=_trickle, args=(sock, [request], 0))
            sender.start()
            status, envelope = _answer(_read_all(sock))
            sender.join()
        assert (status, envelope["error"]["code"]) == (431, "headers_too_large")


@pytest.mark.parametrize(
    "extra",
    [
        [(f"x-h{i}", "v") for i in range(MAX_HEADERS + 1)],  # too many
        [("x-big", "v" * MAX_HEADER_BYTES)],  # too large
    ],
    ids=["count", "bytes"],
)
def test_a_head_past_the_limits_gets_431(gateway: Gateway, extra: list[tuple[str, str]]) -> None:
    response = httpx.get(f"{gateway.base_url}/v1/models", headers=extra, timeout=10)
    assert response.status_code == 431, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "headers_too_large")
    # Within the limits: served.
    fits = extra[: MAX_HEADERS - 5] if len(extra) > 1 else [("x-big", "v" * 1000)]
    assert httpx.get(f"{gateway.base_url}/v1/models", headers=fits, timeout=10).status_code == 200


def _rss_growth_while_unread(gateway: Gateway, path: str, body: dict[str, Any]) -> float:
    """MB cortex's memory grows while a client holds a long stream unread."""
    before = gateway.cortex.memory_info().rss
    with _connect(gateway) as sock:
        # A small receive buffer, so that the kernel holds little on our side.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        payload = json.dumps(body).encode()
        sock.sendall(
            b"POST %s HTTP/1.1\r\nhost: cortex\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (path.encode(), len(payload), payload)
        )
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
        peak = before
        for _ in range(30):  # 3 s of not reading while the neuron could go on
            time.sleep(0.1)
            peak = max(peak, gateway.cortex.memory_info().rss)
    return float(peak - before) / 1e6


def test_a_stream_nobody_reads_holds_bounded_memory(gateway: Gateway) -> None:
    # 16 prompts x 4,000 tokens: ~64,000 chunks if cortex read them all in.
    prompts = [f"prompt {i}" for i in range(16)]
    body = {"model": MODEL, "prompt": prompts, "max_tokens": 4000, "stream": True}
    grown = _rss_growth_while_unread(gateway, "/v1/completions", body)
    print(f"\nunread 16-prompt completion stream: cortex RSS +{grown:.1f} MB")
    assert grown < 20
    chat = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4000,
        "n": 16,
        "stream": True,
    }
    grown = _rss_growth_while_unread(gateway, "/v1/chat/completions", chat)
    print(f"unread n=16 chat stream: cortex RSS +{grown:.1f} MB")
    assert grown < 20
    assert _chat(gateway) == 200
