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

from cortex.store.base import ResponseStore, StoredResponse

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    previous_response_id TEXT,
    response TEXT NOT NULL,
    input_items TEXT NOT NULL
)
"""


class SqliteResponseStore(ResponseStore):
    backend = "sqlite"

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)
        self._lock = asyncio.Lock()

    async def put(self, record: StoredResponse) -> None:
        row = (
            record.id,
            record.created_at,
            record.previous_response_id,
            json.dumps(record.response),
            json.dumps(record.input_items),
        )
        async with self._lock:
            await asyncio.to_thread(
                self._db.execute,
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
                row,
            )

    async def get(self, response_id: str) -> StoredResponse | None:
        async with self._lock:
            row = await asyncio.to_thread(self._fetch, response_id)
        if row is None:
            return None
        return StoredResponse(
            id=row[0],
            created_at=row[1],
            previous_response_id=row[2],
            response=json.loads(row[3]),
            input_items=json.loads(row[4]),
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

    def _fetch(self, response_id: str) -> tuple[str, int, str | None, str, str] | None:
        cursor = self._db.execute(
            "SELECT id, created_at, previous_response_id, response, input_items "
            "FROM responses WHERE id = ?",
            (response_id,),
        )
        row = cursor.fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3], row[4])
