"""Tenants and the usage ledger in PostgreSQL, shared by every cortex
instance (and every worker) that uses the database.

A ledger flush is one transaction of upserts that add (`requests =
requests + excluded.requests`): rows of the same tenant, key, model, class
and hour written by several instances at once add up, none overwrites
another's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import astuple

from cortex.store.postgres_pool import LazyPool
from cortex.store.tenants import Tenant, TenantStore, UsageCounts, UsageKey, UsageRow
from cortex.store.tenants_sql import POSTGRES, TenantSql, usage_row, usage_values

_SQL = TenantSql(POSTGRES)
_SCHEMA_LOCK = 0x6E78_7465_6E74  # "nxtent": any constant other code does not use


class PostgresTenantStore(TenantStore):
    def __init__(self, dsn: str) -> None:
        self._pool = LazyPool(dsn, _SQL.schema, _SCHEMA_LOCK, max_size=4)

    async def put(self, tenant: Tenant) -> None:
        pool = await self._pool.get()
        await pool.execute(_SQL.put, *astuple(tenant))

    async def get(self, name: str) -> Tenant | None:
        row = await (await self._pool.get()).fetchrow(_SQL.get, name)
        return None if row is None else Tenant(*row)

    async def tenants(self) -> list[Tenant]:
        pool = await self._pool.get()
        return [Tenant(*row) for row in await pool.fetch(_SQL.tenants)]

    async def add_usage(self, rows: Mapping[UsageKey, UsageCounts]) -> None:
        if not rows:
            return
        values = usage_values(rows)
        pool = await self._pool.get()
        async with pool.acquire() as conn, conn.transaction():
            await conn.executemany(_SQL.add_usage, values)

    async def usage(
        self, start: int, end: int, tenant: str | None = None, models: list[str] | None = None
    ) -> list[UsageRow]:
        sql, args = _SQL.usage(start, end, tenant, models)
        pool = await self._pool.get()
        return [usage_row(tuple(row)) for row in await pool.fetch(sql, *args)]

    async def close(self) -> None:
        await self._pool.close()
