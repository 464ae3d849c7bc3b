"""The API keys table and the per-key usage counters: the records, and the
interface each backend implements (sqlite_keys.py, postgres_keys.py; both
held to one contract by tests/contract/cortex/store/test_keys_contract.py).

Keys live beside the stored responses (the same SQLite file in the state
directory, or the same PostgreSQL database), so that `neuraxis keys ...`
and every cortex instance using that store see the same keys at once.

Only a key's SHA-256 is kept, never the key. The usage counters are what
the rate limiter (cortex/auth/limiter.py) reads and writes in one atomic
step per admission and per settlement; this module knows nothing of the
limits themselves: the caller passes the arithmetic in (`decide`,
`adjust`), the backend runs it inside its transaction.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# The SQLite file of the state directory (shared with the Responses store).
SQLITE_FILE = "responses.sqlite3"


@dataclass(frozen=True)
class ApiKey:
    """One API key as stored: its public id, its tenant, what it may do."""

    id: str  # "key_…": shown by `keys list`, given to `keys revoke`
    tenant: str
    key_hash: str  # hex SHA-256 of the secret
    created_at: int
    models: list[str] = field(default_factory=list)  # empty: every model
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    expires_at: int | None = None
    revoked_at: int | None = None
    last_used_at: int | None = None

    def to_row(self) -> tuple[Any, ...]:
        """The key as a table row, in KEY_COLUMNS order (its models as JSON text)."""
        return tuple(
            json.dumps(self.models) if name == "models" else getattr(self, name)
            for name in KEY_COLUMNS
        )

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ApiKey:
        values = dict(zip(KEY_COLUMNS, row, strict=True))
        values["models"] = json.loads(values["models"])
        return cls(**values)


# Every backend's keys table has a column per field, read and written in this order.
KEY_COLUMNS = tuple(f.name for f in fields(ApiKey))


@dataclass(frozen=True)
class Usage:
    """A key's counters: requests and tokens in the window that starts at
    `window` (epoch seconds), and the requests in flight now (unexpired
    leases; not a stored number, so a cortex that dies mid-request cannot
    hold a slot for longer than the lease)."""

    window: int = 0
    requests: int = 0
    tokens: int = 0
    in_flight: int = 0


# Given the usage as it stands, the usage to store (admitted) or None
# (refused: nothing changes, no lease is taken).
Decide = Callable[[Usage], Usage | None]
# Given the usage as it stands, the usage to store when a request ends.
Adjust = Callable[[Usage], Usage]


class KeyStore(abc.ABC):
    @abc.abstractmethod
    async def add(self, key: ApiKey) -> None:
        """Store a new key (its id and hash are unique)."""

    @abc.abstractmethod
    async def by_hash(self, key_hash: str) -> ApiKey | None:
        """The key with this hash, revoked and expired ones included."""

    @abc.abstractmethod
    async def list(self) -> list[ApiKey]:
        """Every key, oldest first."""

    @abc.abstractmethod
    async def revoke(self, key_id: str, at: int) -> bool:
        """Mark a key revoked; False if no such key (or already revoked)."""

    @abc.abstractmethod
    async def touch(self, key_id: str, at: int) -> None:
        """Record a use of the key (last_used_at)."""

    @abc.abstractmethod
    async def admit(
        self, key_id: str, lease_id: str, now: float, lease_until: float, decide: Decide
    ) -> Usage:
        """Atomically: read the key's usage (in_flight counting leases
        unexpired at `now`), and if `decide` returns new counters store them
        and take the lease until `lease_until`. Returns the usage read."""

    @abc.abstractmethod
    async def settle(self, key_id: str, lease_id: str, now: float, adjust: Adjust) -> None:
        """Atomically: store `adjust(usage)` and drop the lease."""

    @abc.abstractmethod
    async def usage(self, key_id: str, now: float) -> Usage:
        """The usage as it stands (nothing changes)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the connection(s); harmless twice or before any use."""


def open_key_store(state_dir: Path, postgres_dsn: str | None) -> KeyStore:
    """The key store cortex uses with these settings (and `neuraxis keys`)."""
    if postgres_dsn:
        from cortex.store.postgres_keys import PostgresKeyStore

        return PostgresKeyStore(postgres_dsn)
    from cortex.store.sqlite_keys import SqliteKeyStore

    return SqliteKeyStore(state_dir / SQLITE_FILE)
