"""Each contract's stores on every backend: SQLite (a file in the test's
temporary directory) or PostgreSQL (a fresh database in the package's
server), opened as often as a test asks and all closed after it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from harness.postgres import fresh_database

BACKENDS = ["sqlite", "postgres"]


class _Closes(Protocol):
    async def close(self) -> None: ...


S = TypeVar("S", bound=_Closes)


@contextlib.asynccontextmanager
async def opener(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sqlite: Callable[[Path], S],
    postgres: Callable[[str], S],
) -> AsyncIterator[Callable[[], S]]:
    """A factory opening the store of backend `request.param`; calling it
    again opens the same data (a restarted cortex, another worker)."""
    opened: list[S] = []
    if request.param == "sqlite":
        path = tmp_path / "responses.sqlite3"

        def make() -> S:
            return sqlite(path)
    else:
        dsn = await fresh_database(request.getfixturevalue("postgres_dsn"))

        def make() -> S:
            return postgres(dsn)

    def open_one() -> S:
        store = make()
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


async def close_twice(open_one: Callable[[], S], use: Callable[[S], Awaitable[object]]) -> None:
    """Close a store opened and left unused, then one that was `use`d, twice:
    none of the closes may raise."""
    unused = open_one()
    await unused.close()
    used = open_one()
    await use(used)
    await used.close()
    await used.close()
