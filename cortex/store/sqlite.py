"""The embedded default store: one SQLite file in the state directory.

WAL journal with synchronous=FULL, so that a committed response survives a
crash of the process or the machine. SQLite calls are blocking: they run in a
worker thread, one at a time (a single connection), never on the event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from cortex.store.base import COLUMNS, ResponseStore, StoredResponse

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
    tenant TEXT NOT NULL DEFAULT ''
)
"""
# Columns added after the first layout, for files written by older versions.
_ADDED = {
    "status": "TEXT NOT NULL DEFAULT ''",
    "owner": "TEXT NOT NULL DEFAULT ''",
    "events": "TEXT NOT NULL DEFAULT '[]'",
    "tenant": "TEXT NOT NULL DEFAULT ''",
}


_INSERT = (
    f"INSERT OR REPLACE INTO responses ({', '.join(COLUMNS)}) "
    f"VALUES ({','.join('?' * len(COLUMNS))})"
)


class SqliteResponseStore(ResponseStore):
    backend = "sqlite"

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)
        present = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
        for column, definition in _ADDED.items():
            if column not in present:
                self._db.execute(f"ALTER TABLE responses ADD COLUMN {column} {definition}")
        self._lock = asyncio.Lock()

    async def put(self, record: StoredResponse) -> None:
        row = record.to_row()
        sql = _INSERT
        async with self._lock:
            await asyncio.to_thread(self._db.execute, sql, row)

    async def get(self, response_id: str) -> StoredResponse | None:
        rows = await self._select("WHERE id = ?", (response_id,))
        return rows[0] if rows else None

    async def running(self, owner: str) -> list[StoredResponse]:
        return await self._select(
            "WHERE owner = ? AND status IN ('queued', 'in_progress') ORDER BY created_at, id",
            (owner,),
        )

    async def delete(self, response_id: str) -> bool:
        async with self._lock:
            cursor = await asyncio.to_thread(
                self._db.execute, "DELETE FROM responses WHERE id = ?", (response_id,)
            )
        return cursor.rowcount > 0

    async def close(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._db.close)

    async def _select(self, where: str, args: tuple[Any, ...]) -> list[StoredResponse]:
        sql = f"SELECT {', '.join(COLUMNS)} FROM responses {where}"
        async with self._lock:
            rows = await asyncio.to_thread(lambda: self._db.execute(sql, args).fetchall())
        return [StoredResponse.from_row(row) for row in rows]
