"""The connection the Files and Batches store (batches.py) speaks through:
SQLite (a file of its own in the state directory, `batches.sqlite3`) or
PostgreSQL. The store's SQL is written once, with `?` placeholders; the
PostgreSQL side renumbers them (`$1`, `$2` ...). Only the schemas differ
(column types).

SQLite is blocking: its statements run in a worker thread, one at a time on
one connection, as in sqlite.py (WAL, synchronous=FULL: a line's result
committed survives a crash).
"""

from __future__ import annotations

import abc
import asyncio
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cortex.store import sqlite_file
from cortex.store.postgres_pool import LazyPool

T = TypeVar("T")
Row = Sequence[Any]

# Both backends' tables, written once: `{p}` is the table prefix, `{big}`
# a 64-bit integer, `{real}` a double and `{blob}` bytes in each dialect.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}files (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created_at {big} NOT NULL,
    status TEXT NOT NULL,
    purpose TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes {big} NOT NULL DEFAULT 0,
    lines {big} NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS {p}files_tenant ON {p}files (tenant, created_at);
CREATE INDEX IF NOT EXISTS {p}files_created_at ON {p}files (created_at);
CREATE TABLE IF NOT EXISTS {p}file_chunks (
    file_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data {blob} NOT NULL,
    PRIMARY KEY (file_id, seq)
);
CREATE TABLE IF NOT EXISTS {p}batches (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    created_at {big} NOT NULL,
    status TEXT NOT NULL,
    batch TEXT NOT NULL,
    principal TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    lease_until {real} NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS {p}batches_tenant ON {p}batches (tenant, created_at);
CREATE INDEX IF NOT EXISTS {p}batches_running ON {p}batches (status, lease_until);
CREATE TABLE IF NOT EXISTS {p}batch_results (
    batch_id TEXT NOT NULL,
    line INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (batch_id, line)
);
"""
_SQLITE_SCHEMA = _SCHEMA.format(p="", big="INTEGER", real="REAL", blob="BLOB")
_POSTGRES_SCHEMA = _SCHEMA.format(
    p="neuraxis_", big="BIGINT", real="DOUBLE PRECISION", blob="BYTEA"
)


class Db(abc.ABC):
    """One backend's connection. `prefix` goes before every table name
    (PostgreSQL's tables share a database with others: `neuraxis_`)."""

    prefix = ""
    backend = "unknown"

    @abc.abstractmethod
    async def execute(self, sql: str, *args: Any) -> int:
        """Run a statement; the rows it changed."""

    @abc.abstractmethod
    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        """Run a query (or a statement with RETURNING); its rows."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the connection(s); harmless twice or before any use."""


class SqliteDb(Db):
    backend = "sqlite"

    def __init__(self, path: Path) -> None:
        self._db = sqlite_file.connect_durable(path)
        self._db.executescript(_SQLITE_SCHEMA)
        self._lock = asyncio.Lock()
        self._closed = False

    async def execute(self, sql: str, *args: Any) -> int:
        return await self._call(lambda: int(self._db.execute(sql, args).rowcount))

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        return await self._call(lambda: list(self._db.execute(sql, args).fetchall()))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._call(self._db.close)

    async def _call(self, work: Callable[[], T]) -> T:
        return await sqlite_file.serialized(self._lock, work)


_MARK = re.compile(r"\?")


def numbered(sql: str) -> str:
    """`?` placeholders as PostgreSQL's `$1`, `$2` ..."""
    count = iter(range(1, sql.count("?") + 1))
    return _MARK.sub(lambda _: f"${next(count)}", sql)


# The advisory lock the schema is made under ("nxbtch": any constant other
# code does not use), so that instances starting together do not race.
_SCHEMA_LOCK = 0x6E78_6274_6368


class PostgresDb(Db):
    prefix = "neuraxis_"
    backend = "postgres"

    def __init__(self, dsn: str) -> None:
        self._pool = LazyPool(dsn, _POSTGRES_SCHEMA, _SCHEMA_LOCK, max_size=8)

    async def execute(self, sql: str, *args: Any) -> int:
        pool = await self._pool.get()
        status = await pool.execute(numbered(sql), *args)
        return int(str(status).rsplit(" ", 1)[-1])

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        pool = await self._pool.get()
        return [tuple(row) for row in await pool.fetch(numbered(sql), *args)]

    async def close(self) -> None:
        await self._pool.close()
