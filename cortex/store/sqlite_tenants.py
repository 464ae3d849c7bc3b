"""Tenants and the usage ledger in the state directory's SQLite file (beside
the stored responses and the keys), on a connection of their own.

A tenant's row is written with synchronous=FULL (a change that was
acknowledged survives a crash); a ledger flush is one transaction of
upserts that add, with synchronous=NORMAL (in WAL mode a power cut may lose
the last commits, never corrupt the file): the ledger already accepts
losing the seconds it has not flushed, cortex/store/ledger.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import astuple
from pathlib import Path

from cortex.store import sqlite_file
from cortex.store.sqlite_writes import Immediate, durably
from cortex.store.tenants import Tenant, TenantStore, UsageCounts, UsageKey, UsageRow
from cortex.store.tenants_sql import SQLITE, TenantSql, usage_row, usage_values

_SQL = TenantSql(SQLITE)


class SqliteTenantStore(TenantStore):
    def __init__(self, path: Path, busy_timeout_ms: int = 10_000) -> None:
        self._db = sqlite_file.Serialized(path, _SQL.schema, busy_timeout_ms)

    async def put(self, tenant: Tenant) -> None:
        await self._db.run(lambda db: durably(db, _SQL.put, astuple(tenant)))

    async def get(self, name: str) -> Tenant | None:
        rows = await self._db.run(lambda db: db.execute(_SQL.get, (name,)).fetchall())
        return Tenant(*rows[0]) if rows else None

    async def tenants(self) -> list[Tenant]:
        rows = await self._db.run(lambda db: db.execute(_SQL.tenants).fetchall())
        return [Tenant(*row) for row in rows]

    async def add_usage(self, rows: Mapping[UsageKey, UsageCounts]) -> None:
        values = usage_values(rows)

        def work(db: sqlite3.Connection) -> None:
            with Immediate(db):  # the whole flush or none of it
                db.executemany(_SQL.add_usage, values)

        if values:
            await self._db.run(work)

    async def usage(
        self, start: int, end: int, tenant: str | None = None, models: list[str] | None = None
    ) -> list[UsageRow]:
        statement = _SQL.usage(start, end, tenant, models)  # the SQL and its arguments
        rows = await self._db.run(lambda db: db.execute(*statement).fetchall())
        return [usage_row(row) for row in rows]

    async def close(self) -> None:
        await self._db.close()
