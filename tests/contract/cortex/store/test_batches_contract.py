"""The Files and Batches store (cortex/store/batches.py) on both backends,
SQLite and a real PostgreSQL, through the one class and its SQL: files in
chunks, batches with their leases and compare-and-swap, line results
written once, retention."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from cortex.api.batches import lifecycle
from cortex.store.batch_db import PostgresDb, SqliteDb
from cortex.store.batches import BatchStore, StoredBatch, StoredFile
from tests.contract.cortex.store import backends

Opener = Callable[[], BatchStore]


@pytest.fixture(params=backends.BACKENDS)
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    async with backends.opener(
        request,
        tmp_path,
        lambda path: BatchStore(SqliteDb(path.with_name("batches.sqlite3"))),
        lambda dsn: BatchStore(PostgresDb(dsn)),
    ) as open_one:
        yield open_one


@pytest.fixture
def store(open_store: Opener) -> BatchStore:
    return open_store()


def _file(file_id: str, tenant: str = "t", created_at: int = 100) -> StoredFile:
    return StoredFile(file_id, tenant, created_at, "", "batch", f"{file_id}.jsonl")


def _batch(batch_id: str, tenant: str = "t", created_at: int = 100) -> StoredBatch:
    batch = lifecycle.new_batch(batch_id, "file-1", "/v1/embeddings", "24h", None, created_at)
    return StoredBatch(batch_id, tenant, created_at, batch, {"tenant": tenant})


async def _content(store: BatchStore, file_id: str) -> bytes:
    return b"".join([chunk async for chunk in store.chunks(file_id)])


async def test_a_file_is_stored_in_chunks_and_read_back(open_store: Opener) -> None:
    store = open_store()
    await store.begin_file(_file("f1"))
    assert await store.get_file("f1") is None  # still uploading
    for seq, chunk in enumerate([b"ab\n", b"\x00\xff", b"end\n"]):
        await store.add_chunk("f1", seq, chunk)
    await store.end_file("f1", 9, 2)
    again = open_store()  # another process, or the same restarted
    stored = await again.get_file("f1")
    assert stored is not None and (stored.bytes, stored.lines, stored.tenant) == (9, 2, "t")
    assert await _content(again, "f1") == b"ab\n\x00\xffend\n"
    assert await again.delete_file("f1")
    assert await again.get_file("f1") is None and await _content(again, "f1") == b""
    assert not await again.delete_file("f1")


async def test_files_are_listed_per_tenant_in_pages(store: BatchStore) -> None:
    for i, tenant in enumerate(["t", "t", "u", "t"]):
        await store.begin_file(_file(f"f{i}", tenant, created_at=100 + i))
        await store.end_file(f"f{i}", 0, 0)
    newest = await store.list_files("t", None, 2, None, desc=True)
    assert [f.id for f in newest] == ["f3", "f1"]
    rest = await store.list_files("t", None, 2, newest[-1], desc=True)
    assert [f.id for f in rest] == ["f0"]
    assert [f.id for f in await store.list_files("t", "batch", 10, None, desc=False)] == [
        "f0",
        "f1",
        "f3",
    ]
    assert await store.list_files("t", "batch_output", 10, None, desc=False) == []


async def test_batches_are_kept_listed_and_swapped(open_store: Opener) -> None:
    store = open_store()
    for i in range(3):
        await store.create_batch(_batch(f"b{i}", created_at=100 + i))
    await store.create_batch(_batch("other", tenant="u"))
    page = await store.list_batches("t", 2, None)
    assert [b.id for b in page] == ["b2", "b1"]
    assert [b.id for b in await store.list_batches("t", 2, page[-1])] == ["b0"]
    b0 = await store.get_batch("b0")
    assert b0 is not None and b0.status == "validating" and b0.principal == {"tenant": "t"}
    cancelling = lifecycle.moved(b0.batch, "cancelling", 5)
    assert await store.swap("b0", "validating", cancelling)
    # A runner's progress written as if nothing happened does not undo it.
    assert not await store.swap("b0", "validating", lifecycle.moved(b0.batch, "in_progress", 6))
    again = await open_store().get_batch("b0")
    assert again is not None and again.status == "cancelling" and again.batch["cancelling_at"] == 5


async def test_one_instance_at_a_time_holds_a_batch(store: BatchStore) -> None:
    await store.create_batch(_batch("b0", created_at=100))
    await store.create_batch(_batch("b1", created_at=101))
    first = await store.claim("a", now=1000, until=1030)
    second = await store.claim("b", now=1000, until=1030)
    assert first is not None and second is not None
    assert (first.id, first.owner, second.id) == ("b0", "a", "b1")
    assert await store.claim("c", now=1010, until=1040) is None  # both held
    assert await store.renew("a", ["b0", "b1"], 1060) == {"b0": "validating"}
    taken = await store.claim("c", now=1035, until=1065)  # b's lapsed at 1030
    assert taken is not None and (taken.id, taken.owner) == ("b1", "c")
    assert await store.renew("b", ["b1"], 1070) == {}  # b lost it
    assert await store.held_under("a") == [("b0", "a")]
    assert await store.held_under("z") == []
    await store.release("b0", "a")
    assert await store.held_under("a") == []
    again = await store.claim("d", now=1036, until=1066)
    assert again is not None and again.id == "b0"
    ended = lifecycle.moved(again.batch, "failed", 7)
    assert await store.swap("b0", "validating", ended)
    await store.release("b0", "d")
    assert await store.claim("e", now=2000, until=2030) is not None  # b1, lapsed
    assert await store.claim("e", now=2000, until=2030) is None  # b0 ended: never again


async def test_a_line_result_is_written_once(store: BatchStore) -> None:
    assert await store.record("b", 3, True, '{"n": 3}')
    assert not await store.record("b", 3, False, '{"n": "again"}')
    assert await store.record("b", 1, False, '{"n": 1}')
    for line in range(4, 1200):
        await store.record("b", line, True, f'{{"n": {line}}}')
    assert await store.done_lines("b") == {1, 3, *range(4, 1200)}
    assert await store.counts("b") == (1197, 1)
    ok = [line async for line in store.results("b", True, page=500)]
    assert ok == ['{"n": 3}', *(f'{{"n": {n}}}' for n in range(4, 1200))]
    assert [line async for line in store.results("b", False)] == ['{"n": 1}']
    assert await store.counts("other") == (0, 0)


async def test_purge_deletes_what_is_past_retention(store: BatchStore) -> None:
    for name, created in (("old", 10), ("new", 500)):
        await store.begin_file(_file(name, created_at=created))
        await store.add_chunk(name, 0, b"x")
        await store.end_file(name, 1, 0)
        await store.create_batch(_batch(name, created_at=created))
        await store.record(name, 1, True, "{}")
    assert await store.purge(before=100, limit=1) == 2
    assert await store.get_file("old") is None and await store.get_batch("old") is None
    assert await store.done_lines("old") == set() and await _content(store, "old") == b""
    assert await store.get_file("new") is not None and await store.get_batch("new") is not None


async def test_close_is_harmless_twice(open_store: Opener) -> None:
    await backends.close_twice(open_store, lambda s: s.get_file("x"))
