"""Clients that stop reading are dropped (issue 31 point 4), through real
processes: cortex with a short send deadline in front of a simulated
neuron, and raw sockets with a small receive buffer that never read.

A non-streamed answer larger than the kernel's buffers waits in cortex's
transport; a stream that is not read holds its generation back. Past the
send deadline cortex drops the connection (what waited is freed) and a
stream's generation is cancelled, its engine slot free again.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from harness.gateway import sim_gateway
from harness.polling import wait_until

MODEL = "sim-readers"
SEND_TIMEOUT_S = 2.0
# How long cortex has to drop a client that reads nothing: the deadline, and
# time to fill the buffers first on a loaded machine.
DROPPED_WITHIN_S = 30.0


@dataclass
class Readers:
    base_url: str
    admin_url: str
    port: int
    cortex: psutil.Process


@pytest.fixture(scope="module")
def readers(logs_dir: Path) -> Iterator[Readers]:
    flags = ["--http-send-timeout-s", str(SEND_TIMEOUT_S)]
    neuron = ["--sim-ttft-s", "0", "--sim-itl-s", "0"]
    with sim_gateway(logs_dir, "readers", *flags, served_id=MODEL, neuron_flags=neuron) as running:
        process = psutil.Process(running.cortex.proc.popen.pid)
        yield Readers(running.base_url, running.admin_url, running.cortex.port, process)


def _send_and_never_read(readers: Readers, path: str, body: dict[str, Any]) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    sock.connect(("127.0.0.1", readers.port))
    payload = json.dumps(body).encode()
    head = (
        b"POST %s HTTP/1.1\r\nhost: cortex\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % (path.encode(), len(payload))
    )
    sock.sendall(head + payload)
    return sock


def _connected(readers: Readers, sock: socket.socket) -> bool:
    """Whether cortex still holds the connection from `sock`."""
    ours = sock.getsockname()[1]
    return any(
        c.raddr and c.raddr[1] == ours and c.status == psutil.CONN_ESTABLISHED
        for c in readers.cortex.net_connections("tcp")
    )


def _in_flight(readers: Readers) -> float:
    text = httpx.get(f"{readers.admin_url}/metrics").text
    lines = [line for line in text.splitlines() if line.startswith("neuraxis_requests_in_flight")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def test_a_large_answer_nobody_reads_is_dropped(readers: Readers) -> None:
    # 2 MiB echoed to 4 choices: an 8 MiB answer, more than the buffers hold.
    body = {"model": MODEL, "prompt": "x" * (2 << 20), "echo": True, "n": 4, "max_tokens": 1}
    with _send_and_never_read(readers, "/v1/completions", body) as sock:
        assert wait_until(lambda: _connected(readers, sock), 10)
        assert wait_until(lambda: not _connected(readers, sock), DROPPED_WITHIN_S)


def test_a_stream_nobody_reads_is_cancelled(readers: Readers) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "n": 8,
        "max_tokens": 4000,
    }
    with _send_and_never_read(readers, "/v1/chat/completions", body) as sock:
        assert wait_until(lambda: _in_flight(readers) == 1, 10)
        assert wait_until(lambda: not _connected(readers, sock), DROPPED_WITHIN_S)
        assert wait_until(lambda: _in_flight(readers) == 0, 10)
