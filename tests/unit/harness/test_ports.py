"""free_port: outside the ports the kernel hands out, and free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import harness.ports
from harness.ports import PORTS, free_port


def _ephemeral() -> range:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return range(int(low), int(high) + 1)


def test_a_free_port_is_never_one_the_kernel_gives_outgoing_connections() -> None:
    ephemeral = _ephemeral()
    assert max(PORTS) < ephemeral.start
    ports = {free_port() for _ in range(50)}
    assert not ports & set(ephemeral)


def test_a_taken_port_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = []
    try:
        for _ in range(20):
            s = socket.socket()
            s.bind(("127.0.0.1", free_port()))
            s.listen()
            taken.append(s)
        ports = [s.getsockname()[1] for s in taken]
        free = free_port()
        # Twenty taken ports and one free one to choose from: always the free one.
        monkeypatch.setattr(harness.ports, "PORTS", [*ports, free])
        assert {free_port() for _ in range(100)} == {free}
    finally:
        for s in taken:
            s.close()
