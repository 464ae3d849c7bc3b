"""The shared store: PostgreSQL, for several cortex instances behind one load
balancer (a `previous_response_id` then works whichever instance answers).

A response is committed before the client is told it is complete; the
server's durability settings (synchronous_commit) decide the rest. The
`neuraxis_jobs` table holds the periodic jobs' leases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg

from cortex.store.base import COLUMNS, DELETED, ResponseStore, StoredResponse, in_batches
from cortex.store.sql import RUNNING_ROW, upsert

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
ALTER TABLE neuraxis_responses ADD COLUMN IF NOT EXISTS
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS neuraxis_responses_created_at ON neuraxis_responses (created_at);
CREATE INDEX IF NOT EXISTS neuraxis_responses_running
    ON neuraxis_responses (status, lease_until);
CREATE INDEX IF NOT EXISTS neuraxis_responses_tenant ON neuraxis_responses (tenant);
CREATE TABLE IF NOT EXISTS neuraxis_jobs (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until DOUBLE PRECISION NOT NULL
);
"""
# JSONB read back as text, so that both backends' rows decode alike.
_JSON = {"response", "input_items", "events"}
_SELECT = (
    "SELECT "
    + ", ".join(f"{c}::text" if c in _JSON else c for c in COLUMNS)
    + " FROM neuraxis_responses "
)
_UPSERT = upsert("neuraxis_responses", [f"${i}" for i in range(1, len(COLUMNS) + 1)])


def _count(status: str) -> int:
    """The row count of a command status such as "DELETE 3" or "INSERT 0 1"."""
    return int(status.rsplit(" ", 1)[-1])


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

    async def put(self, record: StoredResponse) -> bool:
        pool = await self._connection_pool()
        # The row (JSON, compacted events: milliseconds for a long answer)
        # is made off the event loop.
        row = await asyncio.to_thread(record.to_row)
        return _count(await pool.execute(_UPSERT, *row)) > 0

    async def get(self, response_id: str) -> StoredResponse | None:
        pool = await self._connection_pool()
        row = await pool.fetchrow(_SELECT + f"WHERE id = $1 AND status != '{DELETED}'", response_id)
        return None if row is None else StoredResponse.from_row(row)

    async def running(self, owner: str) -> list[StoredResponse]:
        return await self._select(
            f"WHERE owner = $1 AND {RUNNING_ROW} ORDER BY created_at, id", owner
        )

    async def running_under(self, prefix: str) -> list[StoredResponse]:
        return await self._select(
            f"WHERE left(owner, $1) = $2 AND {RUNNING_ROW} ORDER BY created_at, id",
            len(prefix),
            prefix,
        )

    async def stored_bytes(self, tenant: str | None = None) -> int:
        pool = await self._connection_pool()
        sql = (
            "SELECT COALESCE(SUM(pg_column_size(response) + pg_column_size(input_items) "
            "+ pg_column_size(events)), 0) FROM neuraxis_responses"
        )
        if tenant is None:
            return int(await pool.fetchval(sql))
        return int(await pool.fetchval(sql + " WHERE tenant = $1", tenant))

    async def delete(self, response_id: str) -> bool:
        pool = await self._connection_pool()
        status = await pool.execute(
            f"UPDATE neuraxis_responses SET status = '{DELETED}', owner = '', "
            "response = '{}', input_items = '[]', events = '[]', lease_until = 0 "
            f"WHERE id = $1 AND status != '{DELETED}'",
            response_id,
        )
        return _count(status) > 0

    async def renew(self, owner: str, ids: Sequence[str], until: float) -> set[str]:
        if not ids:
            return set()
        pool = await self._connection_pool()
        rows = await pool.fetch(
            f"UPDATE neuraxis_responses SET lease_until = $1 WHERE owner = $2 AND {RUNNING_ROW} "
            "AND id = ANY($3::text[]) RETURNING id",
            until,
            owner,
            list(ids),
        )
        return {row[0] for row in rows}

    async def expired(self, now: float) -> list[StoredResponse]:
        return await self._select(
            f"WHERE {RUNNING_ROW} AND lease_until > 0 AND lease_until < $1 ORDER BY created_at, id",
            now,
        )

    async def purge(self, before: int, batch: int = 10_000) -> int:
        pool = await self._connection_pool()
        sql = (
            "DELETE FROM neuraxis_responses WHERE id IN "
            "(SELECT id FROM neuraxis_responses WHERE created_at < $1 LIMIT $2)"
        )

        async def one_batch() -> int:
            return _count(await pool.execute(sql, before, batch))

        return await in_batches(one_batch, batch)  # no transaction holds the whole purge

    async def claim(self, job: str, holder: str, now: float, until: float) -> bool:
        pool = await self._connection_pool()
        status = await pool.execute(
            "INSERT INTO neuraxis_jobs (name, holder, until) VALUES ($1, $2, $3) "
            "ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, until = EXCLUDED.until "
            "WHERE neuraxis_jobs.holder = EXCLUDED.holder OR neuraxis_jobs.until < $4",
            job,
            holder,
            until,
            now,
        )
        return _count(status) > 0

    async def _select(self, where: str, *args: Any) -> list[StoredResponse]:
        pool = await self._connection_pool()
        rows = await pool.fetch(_SELECT + where, *args)
        return [StoredResponse.from_row(row) for row in rows]

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
