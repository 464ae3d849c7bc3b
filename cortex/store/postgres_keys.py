"""API keys and usage counters in PostgreSQL, shared by every cortex
instance (and every worker) that uses the database.

Exactness across instances: an admission or settlement is one transaction
that first locks the key's counter row (`SELECT … FOR UPDATE`, the row made
if missing), so concurrent admissions of one key, whichever instance makes
them, are serialised by the row lock and the limits are exact. Requests of
different keys never wait for each other. In-flight requests are leases
with an expiry, so an instance that dies mid-request frees its slots when
the leases run out.
"""

from __future__ import annotations

from typing import Any

from cortex.store.keys import KEY_COLUMNS, Adjust, ApiKey, Decide, KeyStore, Usage
from cortex.store.postgres_pool import LazyPool

_SCHEMA = """
CREATE TABLE IF NOT EXISTS neuraxis_api_keys (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    models TEXT NOT NULL DEFAULT '[]',
    rpm BIGINT,
    tpm BIGINT,
    max_concurrent BIGINT,
    expires_at BIGINT,
    revoked_at BIGINT,
    last_used_at BIGINT
);
CREATE TABLE IF NOT EXISTS neuraxis_api_key_usage (
    key_id TEXT PRIMARY KEY,
    window_start BIGINT NOT NULL,
    requests BIGINT NOT NULL,
    tokens BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS neuraxis_api_key_leases (
    id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS neuraxis_api_key_leases_key
    ON neuraxis_api_key_leases (key_id, expires_at);
"""
_SCHEMA_LOCK = 0x6E78_6B65_7973  # "nxkeys": any constant other code does not use
_SELECT = f"SELECT {', '.join(KEY_COLUMNS)} FROM neuraxis_api_keys "
_USAGE = "SELECT window_start, requests, tokens FROM neuraxis_api_key_usage WHERE key_id = $1"
_LOCK_USAGE = _USAGE + " FOR UPDATE"
_IN_FLIGHT = "SELECT COUNT(*) FROM neuraxis_api_key_leases WHERE key_id = $1 AND expires_at > $2"
_STORE_USAGE = (
    "UPDATE neuraxis_api_key_usage SET window_start = $2, requests = $3, tokens = $4 "
    "WHERE key_id = $1"
)


class PostgresKeyStore(KeyStore):
    def __init__(self, dsn: str) -> None:
        self._pool = LazyPool(dsn, _SCHEMA, _SCHEMA_LOCK, max_size=8)

    async def add(self, key: ApiKey) -> None:
        pool = await self._pool.get()
        placeholders = ", ".join(f"${i}" for i in range(1, len(KEY_COLUMNS) + 1))
        await pool.execute(
            f"INSERT INTO neuraxis_api_keys ({', '.join(KEY_COLUMNS)}) VALUES ({placeholders})",
            *key.to_row(),
        )

    async def by_hash(self, key_hash: str) -> ApiKey | None:
        pool = await self._pool.get()
        row = await pool.fetchrow(_SELECT + "WHERE key_hash = $1", key_hash)
        return None if row is None else ApiKey.from_row(row)

    async def list(self) -> list[ApiKey]:
        pool = await self._pool.get()
        return [ApiKey.from_row(r) for r in await pool.fetch(_SELECT + "ORDER BY created_at, id")]

    async def revoke(self, key_id: str, at: int) -> bool:
        pool = await self._pool.get()
        status = await pool.execute(
            "UPDATE neuraxis_api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
            at,
            key_id,
        )
        return bool(status != "UPDATE 0")

    async def touch(self, key_id: str, at: int) -> None:
        pool = await self._pool.get()
        await pool.execute(
            "UPDATE neuraxis_api_keys SET last_used_at = $1 WHERE id = $2", at, key_id
        )

    async def admit(
        self, key_id: str, lease_id: str, now: float, lease_until: float, decide: Decide
    ) -> Usage:
        pool = await self._pool.get()
        async with pool.acquire() as conn, conn.transaction():
            seen = await _locked_usage(conn, key_id, now)
            await conn.execute(
                "DELETE FROM neuraxis_api_key_leases WHERE key_id = $1 AND expires_at <= $2",
                key_id,
                now,
            )
            stored = decide(seen)
            if stored is not None:
                await conn.execute(
                    _STORE_USAGE, key_id, stored.window, stored.requests, stored.tokens
                )
                await conn.execute(
                    "INSERT INTO neuraxis_api_key_leases (id, key_id, expires_at) "
                    "VALUES ($1, $2, $3)",
                    lease_id,
                    key_id,
                    lease_until,
                )
            return seen

    async def settle(self, key_id: str, lease_id: str, now: float, adjust: Adjust) -> None:
        pool = await self._pool.get()
        async with pool.acquire() as conn, conn.transaction():
            stored = adjust(await _locked_usage(conn, key_id, now))
            await conn.execute(_STORE_USAGE, key_id, stored.window, stored.requests, stored.tokens)
            await conn.execute("DELETE FROM neuraxis_api_key_leases WHERE id = $1", lease_id)

    async def usage(self, key_id: str, now: float) -> Usage:
        return await _read_usage(await self._pool.get(), _USAGE, key_id, now)

    async def close(self) -> None:
        await self._pool.close()


async def _locked_usage(conn: Any, key_id: str, now: float) -> Usage:
    """The key's counters, its row locked until the transaction ends."""
    await conn.execute(
        "INSERT INTO neuraxis_api_key_usage (key_id, window_start, requests, tokens) "
        "VALUES ($1, 0, 0, 0) ON CONFLICT (key_id) DO NOTHING",
        key_id,
    )
    return await _read_usage(conn, _LOCK_USAGE, key_id, now)


async def _read_usage(conn: Any, query: str, key_id: str, now: float) -> Usage:
    """The key's counters as `query` reads them (_USAGE, or _LOCK_USAGE in a
    transaction), with its requests in flight (leases not expired at `now`)."""
    row = await conn.fetchrow(query, key_id)
    in_flight = await conn.fetchval(_IN_FLIGHT, key_id, now)
    if row is None:
        return Usage(in_flight=in_flight)
    return Usage(window=row[0], requests=row[1], tokens=row[2], in_flight=in_flight)
