"""The fault proxy itself, against a plain TCP echo server: each mode does
what the fault tests rely on."""

from __future__ import annotations

import select
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from harness.faultproxy import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with FaultProxy(server.server_address[1], delay_s=0.3, drip_bytes=4) as made:
        yield made
    server.shutdown()
    server.server_close()


def _connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def _echo(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return _receive(sock, len(data))


def _receive(sock: socket.socket, size: int) -> bytes:
    """`size` bytes, or what came before the connection closed."""
    got = b""
    while len(got) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_pass_forwards_both_ways(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        assert _echo(sock, b"hello") == b"hello"


def test_delay_holds_each_chunk(proxy: FaultProxy) -> None:
    proxy.mode = "delay"
    with _connect(proxy) as sock:
        started = time.monotonic()
        assert _echo(sock, b"hello") == b"hello"
        assert time.monotonic() - started >= 0.6  # there and back


def test_reset_kills_open_connections_and_refuses_new_ones(proxy: FaultProxy) -> None:
    sock = _connect(proxy)
    assert _echo(sock, b"a") == b"a"
    proxy.mode = "reset"
    # The proxy resets it from its own loop: the RST makes the socket readable.
    assert select.select([sock], [], [], 5)[0], "no reset within 5 s"
    with pytest.raises(ConnectionResetError):
        sock.sendall(b"b")
        sock.recv(10)
    sock.close()
    # A new connection is reset: at connect, when the proxy's RST beats the
    # handshake's end, or at the first exchange.
    with pytest.raises(ConnectionResetError), _connect(proxy) as fresh:
        fresh.sendall(b"c")
        fresh.recv(10)
    proxy.mode = "pass"
    with _connect(proxy) as again:
        assert _echo(again, b"d") == b"d"


def test_blackhole_keeps_the_connection_and_forwards_nothing(proxy: FaultProxy) -> None:
    with _connect(proxy) as sock:
        proxy.mode = "blackhole"
        sock.sendall(b"lost")
        with pytest.raises(TimeoutError):
            sock.settimeout(0.5)
            sock.recv(10)


def test_drip_forwards_a_few_bytes_at_a_time(proxy: FaultProxy) -> None:
    proxy.mode = "drip"  # 4 bytes every 0.1 s
    with _connect(proxy) as sock:
        started = time.monotonic()
        assert _echo(sock, b"0123456789abcdef") == b"0123456789abcdef"
        assert time.monotonic() - started >= 0.3


def test_clearing_a_drip_forwards_what_it_was_dripping_at_once(proxy: FaultProxy) -> None:
    # 400 bytes at 4 every 0.1 s would take 10 s; the fault is cleared after
    # 0.3 s, and what was read during it must not go on dripping (the soak
    # holds each fault 10 s: a drip lasting far longer overlapped the next).
    proxy.mode = "drip"
    data = bytes(range(256)) + bytes(144)
    with _connect(proxy) as sock:
        sock.sendall(data)
        time.sleep(0.3)
        proxy.mode = "pass"
        started = time.monotonic()
        assert _receive(sock, len(data)) == data
        assert time.monotonic() - started < 1.0
