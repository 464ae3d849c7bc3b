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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from cortex.store import sqlite_file
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

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY,
    weight REAL NOT NULL,
    max_priority TEXT NOT NULL,
    max_concurrent INTEGER,
    tpm INTEGER
);
CREATE TABLE IF NOT EXISTS usage_ledger (
    tenant TEXT NOT NULL,
    key_id TEXT NOT NULL,
    model TEXT NOT NULL,
    priority TEXT NOT NULL,
    hour INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    total_s REAL NOT NULL,
    queue_s REAL NOT NULL,
    PRIMARY KEY (tenant, key_id, model, priority, hour)
);
CREATE INDEX IF NOT EXISTS usage_ledger_hour ON usage_ledger (hour);
"""
_COLUMNS = (*USAGE_KEY_COLUMNS, *COUNT_COLUMNS)
_ADD_USAGE = (
    f"INSERT INTO usage_ledger ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
    f"ON CONFLICT ({', '.join(USAGE_KEY_COLUMNS)}) DO UPDATE SET "
    + ", ".join(f"{c} = {c} + excluded.{c}" for c in COUNT_COLUMNS)
)
_SELECT_TENANT = f"SELECT {', '.join(TENANT_COLUMNS)} FROM tenants "


class SqliteTenantStore(TenantStore):
    def __init__(self, path: Path, busy_timeout_ms: int = 10_000) -> None:
        self._db = sqlite_file.Serialized(path, _SCHEMA, busy_timeout_ms)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await self._db.run(work)

    async def put(self, tenant: Tenant) -> None:
        values = tuple(getattr(tenant, c) for c in TENANT_COLUMNS)
        sql = (
            f"INSERT INTO tenants ({', '.join(TENANT_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(TENANT_COLUMNS))}) ON CONFLICT (name) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in TENANT_COLUMNS if c != "name")
        )

        def work(db: sqlite3.Connection) -> None:
            db.execute("PRAGMA synchronous=FULL")
            try:
                db.execute(sql, values)
            finally:
                db.execute("PRAGMA synchronous=NORMAL")

        await self._run(work)

    async def get(self, name: str) -> Tenant | None:
        rows = await self._run(
            lambda db: db.execute(_SELECT_TENANT + "WHERE name = ?", (name,)).fetchall()
        )
        return Tenant(*rows[0]) if rows else None

    async def tenants(self) -> list[Tenant]:
        rows = await self._run(lambda db: db.execute(_SELECT_TENANT + "ORDER BY name").fetchall())
        return [Tenant(*row) for row in rows]

    async def add_usage(self, rows: Mapping[UsageKey, UsageCounts]) -> None:
        values = usage_values(rows)

        def work(db: sqlite3.Connection) -> None:
            # One transaction: the whole flush or none of it.
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(_ADD_USAGE, values)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

        if values:
            await self._run(work)

    async def usage(
        self, start: int, end: int, tenant: str | None = None, models: list[str] | None = None
    ) -> list[UsageRow]:
        where, args = usage_filter(start, end, tenant, models, lambda n: "?")
        sql = f"SELECT {', '.join(_COLUMNS)} FROM usage_ledger WHERE {where} ORDER BY hour"
        rows = await self._run(lambda db: db.execute(sql, args).fetchall())
        return [usage_row(row) for row in rows]

    async def close(self) -> None:
        await self._db.close()
