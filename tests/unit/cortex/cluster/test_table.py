"""The endpoint table's long poll across controllers: each controller's
table has its own epoch, and version 0 means nothing published yet."""

from __future__ import annotations

import asyncio

from cortex.cluster.table import Endpoint, EndpointTable
from harness.clock import settle

CHAT = Endpoint("chat-1", "chat", "127.0.0.1:50051", "ada", 9400)


async def test_a_follower_of_another_epoch_gets_a_new_controller_s_table_at_once() -> None:
    table = EndpointTable("new")
    await table.publish([CHAT])
    # The follower knew version 5 of the old controller; this one is at 1.
    current = await asyncio.wait_for(table.wait(5, 30.0, known_epoch="old"), 1.0)
    assert (current["epoch"], current["version"]) == ("new", 1)
    assert [r["replica"] for r in current["replicas"]] == ["chat-1"]


async def test_a_follower_of_another_epoch_waits_while_nothing_is_published() -> None:
    table = EndpointTable("new")
    waiting = asyncio.create_task(table.wait(5, 30.0, known_epoch="old"))
    await settle()
    assert not waiting.done()
    await table.publish([CHAT])
    current = await asyncio.wait_for(waiting, 1.0)
    assert current["version"] == 1


async def test_a_follower_of_the_same_epoch_waits_for_a_newer_version() -> None:
    table = EndpointTable("same")
    await table.publish([CHAT])
    waiting = asyncio.create_task(table.wait(1, 30.0, known_epoch="same"))
    await settle()
    assert not waiting.done()
    await table.publish([])
    assert (await asyncio.wait_for(waiting, 1.0))["version"] == 2


async def test_the_first_table_is_published_even_when_empty() -> None:
    # cortex is ready once it has a table: a cluster whose replicas are all
    # still loading (or unplaceable) must still give it one.
    table = EndpointTable("e")
    await table.publish([])
    assert table.version == 1
    await table.publish([])
    assert table.version == 1  # no change after the first: no new version
    answer = await table.wait(0, 0.01, "e")
    assert (answer["version"], answer["replicas"]) == (1, [])
