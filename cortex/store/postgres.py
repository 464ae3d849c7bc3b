"""The shared store: PostgreSQL, for several cortex instances behind one load
balancer (a `previous_response_id` then works whichever instance answers).

A response is committed before the client is told it is complete; the
server's durability settings (synchronous_commit) decide the rest.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from cortex.store.base import ResponseStore, StoredResponse

_SCHEMA = """
CREATE TABLE IF NOT EXISTS neuraxis_responses (
    id TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    previous_response_id TEXT,
    response JSONB NOT NULL,
    input_items JSONB NOT NULL
)
"""


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
        await pool.execute(
            "INSERT INTO neuraxis_responses VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (id) DO UPDATE SET response = EXCLUDED.response, "
            "input_items = EXCLUDED.input_items",
            record.id,
            record.created_at,
            record.previous_response_id,
            json.dumps(record.response),
            json.dumps(record.input_items),
        )

    async def get(self, response_id: str) -> StoredResponse | None:
        pool = await self._connection_pool()
        row = await pool.fetchrow(
            "SELECT id, created_at, previous_response_id, response::text, input_items::text "
            "FROM neuraxis_responses WHERE id = $1",
            response_id,
        )
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
        pool = await self._connection_pool()
        status = await pool.execute("DELETE FROM neuraxis_responses WHERE id = $1", response_id)
        return bool(status != "DELETE 0")

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
