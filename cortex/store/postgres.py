"""The shared store: PostgreSQL, for several cortex instances behind one load
balancer (a `previous_response_id` then works whichever instance answers).

A response is committed before the client is told it is complete; the
server's durability settings (synchronous_commit) decide the rest.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from cortex.store.base import COLUMNS, ResponseStore, StoredResponse

_SCHEMA = """
CREATE TABLE IF NOT EXISTS neuraxis_responses (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    previous_response_id TEXT,
    status TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    response JSONB NOT NULL,
    input_items JSONB NOT NULL,
    events JSONB NOT NULL DEFAULT '[]',
    tenant TEXT NOT NULL DEFAULT ''
);
ALTER TABLE neuraxis_responses ADD COLUMN IF NOT EXISTS status TEXT NOT NULL DEFAULT '';
ALTER TABLE neuraxis_responses ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT '';
ALTER TABLE neuraxis_responses ADD COLUMN IF NOT EXISTS events JSONB NOT NULL DEFAULT '[]';
ALTER TABLE neuraxis_responses ADD COLUMN IF NOT EXISTS tenant TEXT NOT NULL DEFAULT '';
"""
# JSONB read back as text, so that both backends' rows decode alike.
_JSON = {"response", "input_items", "events"}
_SELECT = (
    "SELECT "
    + ", ".join(f"{c}::text" if c in _JSON else c for c in COLUMNS)
    + " FROM neuraxis_responses "
)
_UPSERT = (
    f"INSERT INTO neuraxis_responses ({', '.join(COLUMNS)}) VALUES "
    f"({', '.join(f'${i}' for i in range(1, len(COLUMNS) + 1))}) ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS if c != "id")
)


class PostgresResponseStore(ResponseStore):
    backend = "postgres"

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._pool: Any = None

    async def _connection_pool(self) -> Any:
        # Created on first use, inside the server's event loop.
        if self._pool is None:
            self._pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=8)
            async with self._pool.acquire() as conn:
                await conn.execute(_SCHEMA)
        return self._pool

    async def put(self, record: StoredResponse) -> None:
        pool = await self._connection_pool()
        await pool.execute(_UPSERT, *record.to_row())

    async def get(self, response_id: str) -> StoredResponse | None:
        pool = await self._connection_pool()
        row = await pool.fetchrow(_SELECT + "WHERE id = $1", response_id)
        return None if row is None else StoredResponse.from_row(row)

    async def running(self, owner: str) -> list[StoredResponse]:
        pool = await self._connection_pool()
        rows = await pool.fetch(
            _SELECT + "WHERE owner = $1 AND status IN ('queued', 'in_progress') "
            "ORDER BY created_at, id",
            owner,
        )
        return [StoredResponse.from_row(row) for row in rows]

    async def delete(self, response_id: str) -> bool:
        pool = await self._connection_pool()
        status = await pool.execute("DELETE FROM neuraxis_responses WHERE id = $1", response_id)
        return bool(status != "DELETE 0")

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
