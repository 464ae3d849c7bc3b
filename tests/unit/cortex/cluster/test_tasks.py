"""The controller's per-replica tasks: one per replica, a failure logged
with the replica, a start cancelled by a drain."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cortex.cluster.tasks import ReplicaTasks


async def test_a_task_that_fails_is_logged_with_its_replica(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = ReplicaTasks()

    async def fails() -> None:
        raise RuntimeError("boom")

    tasks.run("chat-1", fails())
    with caplog.at_level(logging.ERROR, logger="neuraxis.controller"):
        await tasks.wait()
        await asyncio.sleep(0)  # the done callback runs on the next turn
    assert any("replica chat-1: boom" in r.getMessage() for r in caplog.records)


async def test_cancel_stops_a_running_task_and_wait_returns_when_all_end() -> None:
    tasks = ReplicaTasks()
    hold = asyncio.Event()
    ended: list[str] = []

    async def starting() -> None:
        try:
            await hold.wait()
        finally:
            ended.append("start")

    async def draining() -> None:
        ended.append("drain")

    tasks.run("chat-1", starting())
    await asyncio.sleep(0)
    tasks.cancel("chat-1")  # a drain of a replica still starting
    tasks.run("chat-1", draining())
    tasks.cancel("chat-9")  # none: nothing happens
    await tasks.wait()
    assert sorted(ended) == ["drain", "start"]
