"""The embedded default store: one SQLite file in the state directory.

WAL journal with synchronous=FULL, so that a committed response survives a
crash of the process or the machine. SQLite calls are blocking: they run in a
worker thread, one at a time (a single connection), never on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from cortex.store.base import ResponseStore, StoredResponse

_COLUMNS = (
    "id",
    "created_at",
    "previous_response_id",
    "status",
    "owner",
    "response",
    "input_items",
    "events",
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    previous_response_id TEXT,
    status TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    response TEXT NOT NULL,
    input_items TEXT NOT NULL,
    events TEXT NOT NULL DEFAULT '[]'
)
"""
# Columns added after the first layout, for files written by older versions.
_ADDED = {
    "status": "TEXT NOT NULL DEFAULT ''",
    "owner": "TEXT NOT NULL DEFAULT ''",
    "events": "TEXT NOT NULL DEFAULT '[]'",
}


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
        row = (
            record.id,
            record.created_at,
            record.previous_response_id,
            record.status,
            record.owner,
            json.dumps(record.response),
            json.dumps(record.input_items),
            json.dumps(record.events),
        )
        sql = f"INSERT OR REPLACE INTO responses ({', '.join(_COLUMNS)}) VALUES (?,?,?,?,?,?,?,?)"
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
        sql = f"SELECT {', '.join(_COLUMNS)} FROM responses {where}"
        async with self._lock:
            rows = await asyncio.to_thread(lambda: self._db.execute(sql, args).fetchall())
        return [_record(row) for row in rows]


def _record(row: tuple[Any, ...]) -> StoredResponse:
    return StoredResponse(
        id=row[0],
        created_at=row[1],
        previous_response_id=row[2],
        owner=row[4],
        response=json.loads(row[5]),
        input_items=json.loads(row[6]),
        events=json.loads(row[7]),
    )
