"""cortex's table follower with fake controllers: it keeps the last table
while the controller is gone, re-creates it, and takes the new one's table."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from ray.exceptions import RayActorError

from cortex.cluster.client import Followed, follow_table, report_forever, retry_delay
from cortex.cluster.table import Endpoint, EndpointTable

A = Endpoint("chat-1", "chat", "127.0.0.1:50051", "ada", 9400)
B = Endpoint("chat-2", "chat", "127.0.0.1:50052", "ada", 9401)


class FakeMethod:
    def __init__(self, call: Callable[..., Coroutine[Any, Any, Any]]) -> None:
        self._call = call

    def remote(self, *args: Any) -> Coroutine[Any, Any, Any]:
        return self._call(*args)


class FakeController:
    """A controller actor: its long poll fails (as Ray's calls do) once it dies."""

    def __init__(self, epoch: str) -> None:
        self.endpoints = EndpointTable(epoch)
        self.died = asyncio.Event()
        self.table = FakeMethod(self._table)

    async def _table(self, version: int, timeout_s: float, epoch: str | None) -> Any:
        waiting = asyncio.ensure_future(self.endpoints.wait(version, timeout_s, epoch))
        died = asyncio.ensure_future(self.died.wait())
        await asyncio.wait([waiting, died], return_when=asyncio.FIRST_COMPLETED)
        if self.died.is_set():
            waiting.cancel()
            raise RayActorError()
        died.cancel()
        return waiting.result()


class FakeLink:
    """Reconnecting finds the next controller (Ray's restart, or a new one)."""

    def __init__(self, first: FakeController) -> None:
        self.actor = first
        self.next: FakeController | None = None
        self.reconnects = 0
        self.restarting = False  # Ray restarts the actor: a reconnect fails meanwhile

    def reconnect(self) -> None:
        self.reconnects += 1
        if self.restarting:
            raise RuntimeError("The actor is temporarily unavailable: the actor is restarting")
        if self.next is not None:
            self.actor = self.next


class FakeWakes:
    def __init__(self) -> None:
        self.on_wake: Callable[[], None] = lambda: None


class FakePool:
    def __init__(self) -> None:
        self.updates: list[list[str]] = []
        self.adapters: list[dict[str, str]] = []
        self.changed = asyncio.Event()
        self.wakes = FakeWakes()

    def set_adapters(self, parents: dict[str, str]) -> None:
        self.adapters.append(dict(parents))

    def in_flight(self) -> dict[str, int]:
        return {}

    def waiting(self) -> dict[str, int]:
        return {"m": 1}

    def caps(self) -> dict[str, int]:
        return {"m": 16}

    def kv_usage(self) -> dict[str, float]:
        return {"m": 0.5}

    async def update(self, addresses: list[str]) -> None:
        self.updates.append(addresses)
        self.changed.set()

    async def wait_for(self, count: int) -> None:
        while len(self.updates) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 10.0)


async def test_the_follower_keeps_the_last_table_until_a_new_controller_publishes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "neuraxis.cortex")
    old = FakeController("old")
    await old.endpoints.publish([A, B])
    link, pool = FakeLink(old), FakePool()
    following = asyncio.create_task(follow_table(link, pool))  # type: ignore[arg-type]
    try:
        await pool.wait_for(1)
        assert pool.updates == [[A.address, B.address]]
        # The controller dies; the new one is still adopting (nothing published).
        new = FakeController("new")
        link.next = new
        old.died.set()
        while link.reconnects == 0 or "the controller is back" not in caplog.text:
            await asyncio.sleep(0.05)
        assert pool.updates == [[A.address, B.address]]  # never emptied
        await new.endpoints.publish([A, B])
        await pool.wait_for(2)
        assert pool.updates[1] == [A.address, B.address]
        # And it follows the new controller's changes from then on.
        await new.endpoints.publish([A])
        await pool.wait_for(3)
        assert pool.updates[2] == [A.address]
    finally:
        following.cancel()
    assert "lost the controller (RayActorError)" in caplog.text


async def test_a_controller_ray_restarted_is_back_though_a_reconnect_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "neuraxis.cortex")
    first = FakeController("first")
    await first.endpoints.publish([A])
    link, pool = FakeLink(first), FakePool()
    link.restarting = True
    following = asyncio.create_task(follow_table(link, pool))  # type: ignore[arg-type]
    try:
        await pool.wait_for(1)
        first.died.set()
        while "the controller is still unreachable" not in caplog.text:
            await asyncio.sleep(0.05)
        # Ray's restart: the same handle reaches the restarted actor.
        restarted = FakeController("restarted")
        await restarted.endpoints.publish([A, B])
        link.actor = restarted
        await pool.wait_for(2)
        assert "the controller is back" in caplog.text
    finally:
        following.cancel()


async def test_the_follower_hands_the_controller_s_adapters_to_the_pool_with_each_table() -> None:
    controller = FakeController("e")
    await controller.endpoints.publish([A], {"legal": "chat"})
    link, pool = FakeLink(controller), FakePool()
    following = asyncio.create_task(follow_table(link, pool))  # type: ignore[arg-type]
    try:
        await pool.wait_for(1)
        # Added at run time, then the spec's one removed: same replicas, new tables.
        await controller.endpoints.publish([A], {"legal": "chat", "support": "chat"})
        await pool.wait_for(2)
        await controller.endpoints.publish([A], {"support": "chat"})
        await pool.wait_for(3)
    finally:
        following.cancel()
    assert pool.adapters == [
        {"legal": "chat"},
        {"legal": "chat", "support": "chat"},
        {"support": "chat"},
    ]


def test_retries_to_reach_the_controller_back_off_to_10_s() -> None:
    assert [retry_delay(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 10, 10]


class ReportingController(FakeController):
    """Records the reports it gets; with `fail_first`, the first one fails
    as a lost controller's call does."""

    def __init__(self, fail_first: bool = False) -> None:
        super().__init__("e1")
        self.fail_first = fail_first
        self.reports: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.report = FakeMethod(self._report)

    async def _report(self, report: dict[str, Any]) -> None:
        if self.fail_first and not self.died.is_set():
            self.died.set()  # one failure, then reports get through
            raise RayActorError()
        self.reports.append(report)
        self.arrived.set()

    async def until_reports(self, count: int) -> None:
        """Until `count` reports have arrived (fails after 5 s)."""
        async with asyncio.timeout(5.0):
            while len(self.reports) < count:
                await self.arrived.wait()
                self.arrived.clear()


class CountingPool(FakePool):
    def __init__(self) -> None:
        super().__init__()
        self.counts = iter([{"a:1": 1}, {"a:1": 2}, {"a:1": 3}, {"a:1": 4}])

    def in_flight(self) -> dict[str, int]:
        return next(self.counts)


async def test_cortex_reports_its_requests_in_flight_and_survives_a_failed_report() -> None:
    controller = ReportingController(fail_first=True)
    followed = Followed(version=3, epoch="e1")
    task = asyncio.create_task(
        report_forever(FakeLink(controller), CountingPool(), followed, interval_s=0.01)  # type: ignore[arg-type]
    )
    try:
        await controller.until_reports(2)
    finally:
        task.cancel()
    first, second = controller.reports[:2]
    # The first report was lost; the next ones carry the current counts.
    assert (first["in_flight"], second["in_flight"]) == ({"a:1": 2}, {"a:1": 3})
    assert first["table_version"] == 3
    assert (first["queued"], first["caps"], first["kv_usage"]) == ({"m": 1}, {"m": 16}, {"m": 0.5})
    assert first["instance"] == f"{first['host']}:{first['pid']}"


async def test_a_request_waking_a_model_is_reported_at_once_not_at_the_interval() -> None:
    controller, pool = ReportingController(), FakePool()
    task = asyncio.create_task(
        report_forever(FakeLink(controller), pool, Followed(), interval_s=3600)  # type: ignore[arg-type]
    )
    try:
        await controller.until_reports(1)
        pool.wakes.on_wake()  # a request for a model at zero replicas
        await controller.until_reports(2)
    finally:
        task.cancel()
    assert len(controller.reports) == 2
