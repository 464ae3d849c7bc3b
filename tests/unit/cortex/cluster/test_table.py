"""The endpoint table's long poll across controllers: each controller's
table has its own epoch, and version 0 means nothing published yet."""

from __future__ import annotations

import asyncio

import pytest

from cortex.cluster.table import Endpoint, EndpointTable, TableView
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


async def test_the_adapters_served_are_in_the_table_and_a_change_moves_its_version() -> None:
    table = EndpointTable("e")
    await table.publish([CHAT], {"legal": "chat"})
    await table.publish([CHAT])  # None: the adapters as they were
    assert table.version == 1
    await table.publish([CHAT], {"legal": "chat", "support": "chat"})
    answer = await table.wait(1, 0.01, "e")
    assert answer["version"] == 2
    view = TableView.read({**answer, "adopted": 3})
    assert view == TableView(
        epoch="e",
        version=2,
        addresses=["127.0.0.1:50051"],
        adopted=3,
        adapters={"legal": "chat", "support": "chat"},
    )
    await table.publish([CHAT], {"support": "chat"})  # one removed
    assert (await table.wait(2, 0.01, "e"))["adapters"] == {"support": "chat"}


def test_a_table_without_adapters_reads_as_not_saying_and_a_bad_one_is_refused() -> None:
    older = {"epoch": "e", "version": 4, "replicas": [CHAT.to_dict()]}
    assert TableView.read(older).adapters is None  # a controller of another version
    with pytest.raises(TypeError):
        TableView.read({**older, "adapters": {"legal": 1}})
    with pytest.raises(KeyError):
        TableView.read({"epoch": "e", "replicas": []})
