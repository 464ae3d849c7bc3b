"""Tenants and the usage ledger in PostgreSQL, shared by every cortex
instance (and every worker) that uses the database.

A ledger flush is one transaction of upserts that add (`requests =
requests + excluded.requests`): rows of the same tenant, key, model, class
and hour written by several instances at once add up, none overwrites
another's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cortex.store.postgres_pool import LazyPool
from cortex.store.tenants import (
    COUNT_COLUMNS,
    TENANT_COLUMNS,
    USAGE_KEY_COLUMNS,
    Tenant,
    TenantStore,
    UsageCounts,
    UsageKey,
    UsageRow,
    usage_filter,
    usage_row,
    usage_values,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS neuraxis_tenants (
    name TEXT PRIMARY KEY,
    weight DOUBLE PRECISION NOT NULL,
    max_priority TEXT NOT NULL,
    max_concurrent BIGINT,
    tpm BIGINT
);
CREATE TABLE IF NOT EXISTS neuraxis_usage_ledger (
    tenant TEXT NOT NULL,
    key_id TEXT NOT NULL,
    model TEXT NOT NULL,
    priority TEXT NOT NULL,
    hour BIGINT NOT NULL,
    requests BIGINT NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    cached_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    errors BIGINT NOT NULL,
    total_s DOUBLE PRECISION NOT NULL,
    queue_s DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, key_id, model, priority, hour)
);
CREATE INDEX IF NOT EXISTS neuraxis_usage_ledger_hour ON neuraxis_usage_ledger (hour);
"""
_SCHEMA_LOCK = 0x6E78_7465_6E74  # "nxtent": any constant other code does not use
_COLUMNS = (*USAGE_KEY_COLUMNS, *COUNT_COLUMNS)


def _marks(count: int) -> str:
    return ", ".join(f"${i}" for i in range(1, count + 1))


_PUT = (
    f"INSERT INTO neuraxis_tenants ({', '.join(TENANT_COLUMNS)}) "
    f"VALUES ({_marks(len(TENANT_COLUMNS))}) ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in TENANT_COLUMNS if c != "name")
)
_ADD_USAGE = (
    f"INSERT INTO neuraxis_usage_ledger ({', '.join(_COLUMNS)}) VALUES ({_marks(len(_COLUMNS))}) "
    f"ON CONFLICT ({', '.join(USAGE_KEY_COLUMNS)}) DO UPDATE SET "
    + ", ".join(f"{c} = neuraxis_usage_ledger.{c} + excluded.{c}" for c in COUNT_COLUMNS)
)
_SELECT_TENANT = f"SELECT {', '.join(TENANT_COLUMNS)} FROM neuraxis_tenants "


class PostgresTenantStore(TenantStore):
    def __init__(self, dsn: str) -> None:
        self._pool = LazyPool(dsn, _SCHEMA, _SCHEMA_LOCK, max_size=4)

    async def _connection_pool(self) -> Any:
        return await self._pool.get()

    async def put(self, tenant: Tenant) -> None:
        pool = await self._connection_pool()
        await pool.execute(_PUT, *(getattr(tenant, c) for c in TENANT_COLUMNS))

    async def get(self, name: str) -> Tenant | None:
        pool = await self._connection_pool()
        row = await pool.fetchrow(_SELECT_TENANT + "WHERE name = $1", name)
        return None if row is None else Tenant(*row)

    async def tenants(self) -> list[Tenant]:
        pool = await self._connection_pool()
        return [Tenant(*row) for row in await pool.fetch(_SELECT_TENANT + "ORDER BY name")]

    async def add_usage(self, rows: Mapping[UsageKey, UsageCounts]) -> None:
        if not rows:
            return
        values = usage_values(rows)
        pool = await self._connection_pool()
        async with pool.acquire() as conn, conn.transaction():
            await conn.executemany(_ADD_USAGE, values)

    async def usage(
        self, start: int, end: int, tenant: str | None = None, models: list[str] | None = None
    ) -> list[UsageRow]:
        where, args = usage_filter(start, end, tenant, models, lambda n: f"${n}")
        pool = await self._connection_pool()
        sql = f"SELECT {', '.join(_COLUMNS)} FROM neuraxis_usage_ledger WHERE {where} ORDER BY hour"
        return [usage_row(tuple(row)) for row in await pool.fetch(sql, *args)]

    async def close(self) -> None:
        await self._pool.close()
