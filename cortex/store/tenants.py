"""Tenants and their usage ledger in the store: the records, and the
interface each backend implements (sqlite_tenants.py, postgres_tenants.py,
both speaking the SQL of tenants_sql.py and held to one contract by
tests/contract/cortex/store/test_tenants_contract.py).

A tenant's row is what `neuraxis tenants set` wrote: its weight in the fair
queue, the highest priority class its requests may ask for and its
tenant-wide limits (over all its keys). A tenant with no row gets the
defaults (weight 1, the default class, no tenant-wide limits).

The ledger holds one row per (tenant, key id, model, class, hour) with the
sums of what the requests of that hour used. Rows only ever grow: a flush
adds its counts to the rows (cortex/store/ledger.py batches them), so any
number of cortex processes can write the same rows.

Like the keys, both tables live beside the stored responses (the state
directory's SQLite file, or the PostgreSQL database), so `neuraxis tenants`
and `neuraxis usage` see what every cortex sees.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from axon.priority import DEFAULT_CLASS, PriorityClass
from cortex.store.keys import SQLITE_FILE

HOUR_S = 3600


@dataclass(frozen=True)
class Tenant:
    """A tenant as stored; None: no tenant-wide limit."""

    name: str
    weight: float = 1.0
    max_priority: PriorityClass = DEFAULT_CLASS
    max_concurrent: int | None = None
    tpm: int | None = None


@dataclass(frozen=True, order=True, slots=True)
class UsageKey:
    """What a ledger row is counted by. `key_id` is "" for requests without
    a key (auth off), `tenant` "" for the anonymous tenant."""

    tenant: str
    key_id: str
    model: str
    priority: PriorityClass
    hour: int  # epoch seconds, a multiple of HOUR_S


@dataclass(slots=True)
class UsageCounts:
    """What the requests of one ledger row used, summed."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    errors: int = 0
    total_s: float = 0.0
    queue_s: float = 0.0

    def add(self, other: UsageCounts) -> None:
        # Spelled out, not a loop over the fields: this runs once a request.
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.output_tokens += other.output_tokens
        self.errors += other.errors
        self.total_s += other.total_s
        self.queue_s += other.queue_s


UsageRow = tuple[UsageKey, UsageCounts]


def hour_of(epoch: float) -> int:
    return int(epoch // HOUR_S) * HOUR_S


class TenantStore(abc.ABC):
    @abc.abstractmethod
    async def put(self, tenant: Tenant) -> None:
        """Store the tenant's row, replacing the one of that name."""

    @abc.abstractmethod
    async def get(self, name: str) -> Tenant | None:
        """The tenant's row; None: it has none (the defaults apply)."""

    @abc.abstractmethod
    async def tenants(self) -> list[Tenant]:
        """Every tenant's row, by name."""

    @abc.abstractmethod
    async def add_usage(self, rows: Mapping[UsageKey, UsageCounts]) -> None:
        """Add each row's counts to the ledger's, in one transaction."""

    @abc.abstractmethod
    async def usage(
        self, start: int, end: int, tenant: str | None = None, models: list[str] | None = None
    ) -> list[UsageRow]:
        """The ledger's rows of the hours in [start, end), of `tenant` and
        `models` when given, by hour."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the connection(s); harmless twice or before any use."""


def open_tenant_store(state_dir: Path, postgres_dsn: str | None) -> TenantStore:
    """The tenant store cortex uses with these settings (and `neuraxis
    tenants` and `neuraxis usage`)."""
    if postgres_dsn:
        from cortex.store.postgres_tenants import PostgresTenantStore

        return PostgresTenantStore(postgres_dsn)
    from cortex.store.sqlite_tenants import SqliteTenantStore

    return SqliteTenantStore(state_dir / SQLITE_FILE)
