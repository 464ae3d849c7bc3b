"""The control plane as cortex sees it: the controller and the head seen or
not, the table's age, controller restarts and adoptions (a hand-moved clock,
fake controllers, a real TCP port for the head probe)."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest
from prometheus_client import REGISTRY

from cortex.cluster.client import Followed, follow_table
from cortex.cluster.plane import ControlPlane, head_answers, probe_tcp, watch_head
from harness.clock import ManualClock as Clock
from tests.unit.cortex.cluster.test_client import A, B, FakeController, FakeLink, FakePool


def _sample(name: str, head: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"head": head})


def test_the_tables_age_is_the_time_since_the_controller_last_confirmed_it() -> None:
    clock = Clock()
    plane = ControlPlane("h-age:6379", clock)
    assert plane.table_age_s() is None
    assert _sample("neuraxis_controller_up", "h-age:6379") == 0
    plane.table_confirmed("e1", adopted=0)
    assert _sample("neuraxis_controller_up", "h-age:6379") == 1
    clock.now += 45.0
    plane.refresh()
    assert plane.table_age_s() == 45.0
    assert _sample("neuraxis_endpoint_table_age_seconds", "h-age:6379") == 45.0
    plane.controller_lost()
    assert _sample("neuraxis_controller_up", "h-age:6379") == 0
    clock.now += 5.0
    plane.table_confirmed("e1", adopted=0)
    plane.refresh()
    assert _sample("neuraxis_endpoint_table_age_seconds", "h-age:6379") == 0


def test_a_new_epoch_counts_a_controller_restart_and_its_adoptions() -> None:
    plane = ControlPlane("h-restart:6379", Clock())
    plane.table_confirmed("e1", adopted=5)  # the first controller seen: no restart
    plane.table_confirmed("e1", adopted=5)
    assert (plane.controller_restarts, plane.adopted) == (0, 0)
    plane.table_confirmed("e2", adopted=2)
    plane.table_confirmed("e2", adopted=2)
    plane.table_confirmed("e3", adopted=1)
    assert (plane.controller_restarts, plane.adopted) == (2, 3)
    assert _sample("neuraxis_controller_restarts_total", "h-restart:6379") == 2
    assert _sample("neuraxis_controller_adopted_replicas_total", "h-restart:6379") == 3


def test_the_head_lost_and_back_is_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "neuraxis.cortex")
    plane = ControlPlane("h-log:6379", Clock())
    plane.head_probed(True)
    assert "answers again" not in caplog.text  # the first probe is no return
    for _ in range(3):
        plane.head_probed(False)
    assert caplog.text.count("the Ray head at h-log:6379 does not answer") == 1
    assert _sample("neuraxis_ray_head_up", "h-log:6379") == 0
    plane.head_probed(True)
    plane.head_probed(True)
    assert caplog.text.count("the Ray head at h-log:6379 answers again") == 1
    assert _sample("neuraxis_ray_head_up", "h-log:6379") == 1


async def test_the_probe_sees_a_listening_port_and_not_a_closed_one() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert await probe_tcp(f"127.0.0.1:{port}", timeout_s=2.0)
    assert not await probe_tcp(f"127.0.0.1:{port}", timeout_s=2.0)
    assert not await probe_tcp("no-port-here", timeout_s=2.0)


async def test_the_watch_follows_the_probe() -> None:
    answers = iter([True, False, False, True])
    seen: list[bool] = []
    done = asyncio.Event()

    async def probe(address: str) -> bool:
        assert address == "h-watch:6379"
        try:
            return next(answers)
        except StopIteration:
            done.set()
            await asyncio.Event().wait()  # the watch stays here until cancelled
            raise AssertionError("not reached") from None

    plane = ControlPlane("h-watch:6379", Clock())
    original = plane.head_probed

    def record(up: bool) -> None:
        seen.append(up)
        original(up)

    plane.head_probed = record  # type: ignore[method-assign]
    task = asyncio.create_task(watch_head(plane, interval_s=0.0, probe=probe))
    try:
        await asyncio.wait_for(done.wait(), 5.0)
    finally:
        task.cancel()
    assert seen == [True, False, False, True]
    assert plane.head_up


class AdoptingController(FakeController):
    """A controller whose table says how many replicas it adopted."""

    def __init__(self, epoch: str, adopted: int) -> None:
        super().__init__(epoch)
        self.adopted = adopted

    async def _table(self, version: int, timeout_s: float, epoch: str | None) -> Any:
        table = await super()._table(version, timeout_s, epoch)
        return {**table, "adopted": self.adopted}


async def test_the_follower_reports_a_lost_controller_and_the_new_ones_adoptions() -> None:
    old = AdoptingController("old", adopted=0)
    await old.endpoints.publish([A, B])
    link, pool = FakeLink(old), FakePool()
    plane = ControlPlane("h-follow:6379", Clock())
    followed = Followed(plane=plane)
    following = asyncio.create_task(follow_table(link, pool, followed))  # type: ignore[arg-type]
    try:
        await pool.wait_for(1)
        assert plane.controller_up and plane.epoch == "old"
        new = AdoptingController("new", adopted=2)
        link.next = new
        old.died.set()
        while plane.controller_up:
            await asyncio.sleep(0.01)
        assert _sample("neuraxis_controller_up", "h-follow:6379") == 0
        await new.endpoints.publish([A, B])
        await pool.wait_for(2)
        assert plane.controller_up
        assert (plane.controller_restarts, plane.adopted) == (1, 2)
    finally:
        following.cancel()


def test_head_answers_without_an_event_loop() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert head_answers(f"127.0.0.1:{port}")
    assert not head_answers(f"127.0.0.1:{port}")
