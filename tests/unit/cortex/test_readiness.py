"""cortex tells systemd READY=1 only once it listens, its store is open and,
in cluster mode, it has a table; and its watchdog pings from the loop."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from axon.sdnotify import notify
from cortex.notify_relay import NotifyRelay
from cortex.readiness import Readiness, watchdog


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    yield sock
    sock.close()


def _received(sock: socket.socket) -> list[str]:
    messages = []
    while True:
        try:
            messages.append(sock.recv(4096).decode())
        except BlockingIOError:
            return messages


@pytest.mark.parametrize("cluster", [True, False])
async def test_ready_waits_for_every_condition(systemd: socket.socket, cluster: bool) -> None:
    readiness = Readiness(needs_table=cluster)
    announcing = asyncio.create_task(readiness.announce())
    conditions = [readiness.listening, readiness.store_open] + (
        [readiness.table] if cluster else []
    )
    for condition in conditions:
        await asyncio.sleep(0.01)
        assert not announcing.done() and _received(systemd) == []
        condition.set()
    await asyncio.wait_for(announcing, 1.0)
    assert _received(systemd) == ["READY=1\nSTATUS=serving"]


async def test_the_watchdog_pings_until_cancelled(systemd: socket.socket) -> None:
    pinging = asyncio.create_task(watchdog(0.01))
    pings: list[str] = []
    deadline = asyncio.get_running_loop().time() + 5
    while len(pings) < 3:
        assert asyncio.get_running_loop().time() < deadline, f"pings: {pings}"
        await asyncio.sleep(0.01)
        pings += _received(systemd)
    pinging.cancel()
    assert set(pings) == {"WATCHDOG=1"}
    # Cancelled, it pings no more.
    await asyncio.gather(pinging, return_exceptions=True)
    _received(systemd)
    await asyncio.sleep(0.03)  # three periods: the behaviour under test is silence
    assert _received(systemd) == []


async def test_without_a_watchdog_period_there_is_no_pinging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    await asyncio.wait_for(watchdog(), 1.0)  # returns at once


def test_the_relay_passes_workers_notifications_on(
    systemd: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    relay = NotifyRelay(os.environ["NOTIFY_SOCKET"])
    relay.start()
    try:
        # A worker, which sees the relay's socket as its NOTIFY_SOCKET.
        monkeypatch.setenv("NOTIFY_SOCKET", str(relay.path))
        assert notify("READY=1")
        systemd.settimeout(5)
        systemd.setblocking(True)
        assert systemd.recv(4096) == b"READY=1"
    finally:
        relay.close()
    assert not relay.path.exists()
