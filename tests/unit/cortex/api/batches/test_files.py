"""Writing a stored file a chunk at a time: chunks of the set size whatever
pieces arrive, its lines counted, the caps (413 past the bytes, 400 past the
lines; nothing kept then) and its lines read back across chunk boundaries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from axon.errors import InvalidRequestError, RequestTooLargeError
from cortex.api.batches.files import file_lines, write_file
from cortex.store.batch_db import SqliteDb
from cortex.store.batches import BatchStore, StoredFile


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[BatchStore]:
    opened = BatchStore(SqliteDb(tmp_path / "batches.sqlite3"))
    yield opened
    await opened.close()


async def _pieces(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def _file() -> StoredFile:
    return StoredFile("f", "t", 1, "", "batch", "in.jsonl")


async def test_pieces_are_stored_in_chunks_of_the_set_size(store: BatchStore) -> None:
    stored = await write_file(store, _file(), _pieces(b"one\ntw", b"", b"o\nthree"), 4, 1000, 10)
    assert (stored.bytes, stored.lines) == (13, 3)  # the last line has no newline
    chunks = [c async for c in store.chunks("f")]
    assert chunks == [b"one\n", b"two\n", b"thre", b"e"]
    assert [(n, raw) async for n, raw in file_lines(store, "f")] == [
        (1, b"one"),
        (2, b"two"),
        (3, b"three"),
    ]


@pytest.mark.parametrize(
    ("pieces", "error"),
    [
        ((b"a" * 6, b"b" * 6), RequestTooLargeError),
        ((b"a\nb\nc\n",), InvalidRequestError),
        ((b"a\nb\nc",), InvalidRequestError),
    ],
)
async def test_past_a_cap_nothing_is_kept(
    store: BatchStore, pieces: tuple[bytes, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        await write_file(store, _file(), _pieces(*pieces), 4, 10, 2)
    assert await store.get_file("f") is None
    assert [c async for c in store.chunks("f")] == []
