"""free_port: outside the ports the kernel hands out, and free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import harness.ports
from harness.ports import ALL_PORTS, PORTS, PORTS_ENV, free_port, share


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


def test_a_port_given_is_not_given_again_before_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ports handed out before any is bound (a fleet's neurons, then its
    # cortex) are all different.
    ports = [free_port() for _ in range(8)]
    monkeypatch.setattr(harness.ports, "PORTS", ports)
    monkeypatch.setattr(harness.ports, "_given", set())
    assert sorted(free_port() for _ in range(8)) == sorted(ports)
    # Every one given: the draw starts again.
    assert free_port() in ports


def test_the_lanes_draw_from_shares_that_do_not_overlap() -> None:
    shares = [share(i, 2) for i in range(2)]
    ranges = [range(int(s.split("-")[0]), int(s.split("-")[1]) + 1) for s in shares]
    assert not set(ranges[0]) & set(ranges[1])
    assert min(ranges[0]) == ALL_PORTS.start and max(ranges[1]) < ALL_PORTS.stop


def test_the_share_in_the_environment_is_the_one_drawn_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PORTS_ENV, "21000-21009")
    assert list(harness.ports._ports()) == list(range(21000, 21010))
    monkeypatch.delenv(PORTS_ENV)
    assert harness.ports._ports() == ALL_PORTS
