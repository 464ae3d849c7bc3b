"""The embedded default store: one SQLite file in the state directory.

WAL journal with synchronous=FULL, so that a committed response survives a
crash of the process or the machine. SQLite calls are blocking: they run in a
worker thread, one at a time (a single connection), never on the event loop.
The workers of `--workers N` share the file (busy_timeout: a writer waits for
another's transaction); the `jobs` table holds the periodic jobs' leases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cortex.store import sqlite_file
from cortex.store.base import COLUMNS, DELETED, ResponseStore, StoredResponse, in_batches
from cortex.store.sql import RUNNING_ROW, upsert

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    previous_response_id TEXT,
    status TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    response TEXT NOT NULL,
    input_items TEXT NOT NULL,
    events TEXT NOT NULL DEFAULT '[]',
    tenant TEXT NOT NULL DEFAULT '',
    lease_until REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until REAL NOT NULL
);
"""
_INDEXES = """
CREATE INDEX IF NOT EXISTS responses_created_at ON responses (created_at);
CREATE INDEX IF NOT EXISTS responses_running ON responses (status, lease_until);
CREATE INDEX IF NOT EXISTS responses_tenant ON responses (tenant)
"""
# Columns added after the first layout, for files written by older versions.
_ADDED = {
    "status": "TEXT NOT NULL DEFAULT ''",
    "owner": "TEXT NOT NULL DEFAULT ''",
    "events": "TEXT NOT NULL DEFAULT '[]'",
    "tenant": "TEXT NOT NULL DEFAULT ''",
    "lease_until": "REAL NOT NULL DEFAULT 0",
}


_INSERT = upsert("responses", "?" * len(COLUMNS))
T = TypeVar("T")


class SqliteResponseStore(ResponseStore):
    backend = "sqlite"

    def __init__(self, path: Path) -> None:
        self._db = sqlite_file.connect_durable(path)
        self._db.executescript(_SCHEMA)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
        for column, definition in _ADDED.items():
            if column not in present:
                self._db.execute(f"ALTER TABLE responses ADD COLUMN {column} {definition}")
        self._db.executescript(_INDEXES)
        self._lock = asyncio.Lock()

    async def put(self, record: StoredResponse) -> bool:
        # The row (JSON, compacted events: milliseconds for a long answer)
        # is made in the worker thread too, off the event loop.
        return await self._call(lambda: self._db.execute(_INSERT, record.to_row()).rowcount) > 0

    async def get(self, response_id: str) -> StoredResponse | None:
        rows = await self._select(f"WHERE id = ? AND status != '{DELETED}'", (response_id,))
        return rows[0] if rows else None

    async def running(self, owner: str) -> list[StoredResponse]:
        return await self._select(
            f"WHERE owner = ? AND {RUNNING_ROW} ORDER BY created_at, id", (owner,)
        )

    async def running_under(self, prefix: str) -> list[StoredResponse]:
        return await self._select(
            f"WHERE substr(owner, 1, ?) = ? AND {RUNNING_ROW} ORDER BY created_at, id",
            (len(prefix), prefix),
        )

    async def delete(self, response_id: str) -> bool:
        sql = (
            f"UPDATE responses SET status = '{DELETED}', owner = '', response = '{{}}', "
            f"input_items = '[]', events = '[]', lease_until = 0 "
            f"WHERE id = ? AND status != '{DELETED}'"
        )
        return await self._write(sql, (response_id,)) > 0

    async def renew(self, owner: str, ids: Sequence[str], until: float) -> set[str]:
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        sql = (
            f"UPDATE responses SET lease_until = ? WHERE owner = ? AND {RUNNING_ROW} "
            f"AND id IN ({marks}) RETURNING id"
        )

        def run() -> set[str]:
            return {row[0] for row in self._db.execute(sql, (until, owner, *ids)).fetchall()}

        return await self._call(run)

    async def expired(self, now: float) -> list[StoredResponse]:
        return await self._select(
            f"WHERE {RUNNING_ROW} AND lease_until > 0 AND lease_until < ? ORDER BY created_at, id",
            (now,),
        )

    async def purge(self, before: int, batch: int = 10_000) -> int:
        sql = (
            "DELETE FROM responses WHERE id IN "
            "(SELECT id FROM responses WHERE created_at < ? LIMIT ?)"
        )
        # In batches: other writers wait for one batch, not the whole purge.
        return await in_batches(lambda: self._write(sql, (before, batch)), batch)

    async def claim(self, job: str, holder: str, now: float, until: float) -> bool:
        sql = (
            "INSERT INTO jobs (name, holder, until) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until "
            "WHERE jobs.holder = excluded.holder OR jobs.until < ?"
        )
        return await self._write(sql, (job, holder, until, now)) > 0

    async def stored_bytes(self, tenant: str | None = None) -> int:
        # The JSON is ASCII (json.dumps escapes the rest): characters are bytes.
        sql = "SELECT COALESCE(SUM(length(response) + length(input_items) + length(events)), 0)"
        sql += " FROM responses" + (" WHERE tenant = ?" if tenant is not None else "")
        args = (tenant,) if tenant is not None else ()
        return await self._call(lambda: int(self._db.execute(sql, args).fetchone()[0]))

    async def _write(self, sql: str, args: tuple[Any, ...]) -> int:
        return await self._call(lambda: int(self._db.execute(sql, args).rowcount))

    async def close(self) -> None:
        await self._call(self._db.close)

    async def _select(self, where: str, args: tuple[Any, ...]) -> list[StoredResponse]:
        sql = f"SELECT {', '.join(COLUMNS)} FROM responses {where}"
        return await self._call(
            lambda: [StoredResponse.from_row(row) for row in self._db.execute(sql, args)]
        )

    async def _call(self, work: Callable[[], T]) -> T:
        """`work` on the connection, one at a time (sqlite_file.serialized)."""
        return await sqlite_file.serialized(self._lock, work)
