"""The SQL both tenant stores (sqlite_tenants.py, postgres_tenants.py)
speak: the same tables and statements, spelled once. The two dialects
differ in the tables' prefix, two column types and the placeholders only."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from cortex.store.tenants import Tenant, UsageCounts, UsageKey, UsageRow

# Every backend's tables have a column per field, read and written in this order.
TENANT_COLUMNS = tuple(f.name for f in fields(Tenant))
USAGE_KEY_COLUMNS = tuple(f.name for f in fields(UsageKey))
COUNT_COLUMNS = tuple(f.name for f in fields(UsageCounts))
LEDGER_COLUMNS = (*USAGE_KEY_COLUMNS, *COUNT_COLUMNS)


@dataclass(frozen=True)
class Dialect:
    prefix: str  # of every table and index name
    integer: str  # a whole number column's type
    real: str  # a float column's type
    mark: Callable[[int], str]  # the n-th placeholder (from 1)


SQLITE = Dialect("", "INTEGER", "REAL", lambda n: "?")
POSTGRES = Dialect("neuraxis_", "BIGINT", "DOUBLE PRECISION", lambda n: f"${n}")


class TenantSql:
    """The schema and statements of one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self._mark = dialect.mark
        tenants, ledger = f"{dialect.prefix}tenants", f"{dialect.prefix}usage_ledger"
        i, r = dialect.integer, dialect.real
        self.schema = f"""
CREATE TABLE IF NOT EXISTS {tenants} (
    name TEXT PRIMARY KEY,
    weight {r} NOT NULL,
    max_priority TEXT NOT NULL,
    max_concurrent {i},
    tpm {i}
);
CREATE TABLE IF NOT EXISTS {ledger} (
    tenant TEXT NOT NULL,
    key_id TEXT NOT NULL,
    model TEXT NOT NULL,
    priority TEXT NOT NULL,
    hour {i} NOT NULL,
    requests {i} NOT NULL,
    prompt_tokens {i} NOT NULL,
    cached_tokens {i} NOT NULL,
    output_tokens {i} NOT NULL,
    errors {i} NOT NULL,
    total_s {r} NOT NULL,
    queue_s {r} NOT NULL,
    PRIMARY KEY (tenant, key_id, model, priority, hour)
);
CREATE INDEX IF NOT EXISTS {ledger}_hour ON {ledger} (hour);
"""
        self.put = (
            f"INSERT INTO {tenants} ({', '.join(TENANT_COLUMNS)}) "
            f"VALUES ({self._marks(len(TENANT_COLUMNS))}) ON CONFLICT (name) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in TENANT_COLUMNS if c != "name")
        )
        # Counts add up (the row qualified: PostgreSQL finds a bare name
        # ambiguous), so flushes of several instances never overwrite.
        self.add_usage = (
            f"INSERT INTO {ledger} ({', '.join(LEDGER_COLUMNS)}) "
            f"VALUES ({self._marks(len(LEDGER_COLUMNS))}) "
            f"ON CONFLICT ({', '.join(USAGE_KEY_COLUMNS)}) DO UPDATE SET "
            + ", ".join(f"{c} = {ledger}.{c} + excluded.{c}" for c in COUNT_COLUMNS)
        )
        select_tenant = f"SELECT {', '.join(TENANT_COLUMNS)} FROM {tenants} "
        self.get = select_tenant + f"WHERE name = {self._mark(1)}"
        self.tenants = select_tenant + "ORDER BY name"
        self._select_usage = f"SELECT {', '.join(LEDGER_COLUMNS)} FROM {ledger} WHERE "

    def usage(
        self, start: int, end: int, tenant: str | None, models: list[str] | None
    ) -> tuple[str, list[object]]:
        """The statement of TenantStore.usage, and its arguments."""
        where, args = usage_filter(start, end, tenant, models, self._mark)
        return f"{self._select_usage}{where} ORDER BY hour", args

    def _marks(self, count: int) -> str:
        return ", ".join(self._mark(n) for n in range(1, count + 1))


def usage_filter(
    start: int,
    end: int,
    tenant: str | None,
    models: list[str] | None,
    mark: Callable[[int], str],
) -> tuple[str, list[object]]:
    """The WHERE clause of `usage` and its arguments; `mark(n)` spells the
    n-th parameter (SQLite "?", PostgreSQL "$n")."""
    args: list[object] = []

    def param(value: object) -> str:
        args.append(value)
        return mark(len(args))

    clauses = [f"hour >= {param(start)}", f"hour < {param(end)}"]
    if tenant is not None:
        clauses.append(f"tenant = {param(tenant)}")
    if models:
        clauses.append(f"model IN ({', '.join(param(m) for m in models)})")
    return " AND ".join(clauses), args


def usage_values(rows: Mapping[UsageKey, UsageCounts]) -> list[tuple[Any, ...]]:
    """The rows of a flush as statement arguments (USAGE_KEY_COLUMNS then
    COUNT_COLUMNS), in the key's order: two flushes of the same rows at once
    lock them in the same order, so they wait for each other, never deadlock."""
    return [
        (*(getattr(k, c) for c in USAGE_KEY_COLUMNS), *(getattr(rows[k], c) for c in COUNT_COLUMNS))
        for k in sorted(rows)
    ]


def usage_row(values: Sequence[Any]) -> UsageRow:
    """A selected row (USAGE_KEY_COLUMNS then COUNT_COLUMNS) as records."""
    width = len(USAGE_KEY_COLUMNS)
    key = UsageKey(*values[:width])
    return key, UsageCounts(*values[width:])
