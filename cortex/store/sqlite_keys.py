"""API keys and usage counters in the state directory's SQLite file (beside
the stored responses), on a connection of their own.

Exactness with `--workers N` (or several cortex processes on one state
directory): every admission and settlement is one `BEGIN IMMEDIATE`
transaction, which takes SQLite's write lock for the whole
read-decide-write, so the workers' updates of a key's counters are
serialised by the file itself and none is lost; the limits are exact, not
approximate. Waiting for the lock is bounded by busy_timeout.

Counters are written with synchronous=NORMAL (in WAL mode: a commit may be
lost to a power cut, the file stays sound): they are a minute's bookkeeping
and an fsync per request would cost more than the whole auth path. Keys
themselves (add, revoke) are written with synchronous=FULL: a revocation
that was acknowledged survives a crash.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cortex.store import sqlite_file
from cortex.store.keys import KEY_COLUMNS, Adjust, ApiKey, Decide, KeyStore, Usage
from cortex.store.sqlite_writes import Immediate, durably

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    models TEXT NOT NULL DEFAULT '[]',
    rpm INTEGER,
    tpm INTEGER,
    max_concurrent INTEGER,
    expires_at INTEGER,
    revoked_at INTEGER,
    last_used_at INTEGER
);
CREATE TABLE IF NOT EXISTS api_key_usage (
    key_id TEXT PRIMARY KEY,
    window_start INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    tokens INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS api_key_leases (
    id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS api_key_leases_key ON api_key_leases (key_id, expires_at);
"""
_SELECT = f"SELECT {', '.join(KEY_COLUMNS)} FROM api_keys "
_UPSERT_USAGE = (
    "INSERT INTO api_key_usage (key_id, window_start, requests, tokens) VALUES (?,?,?,?) "
    "ON CONFLICT (key_id) DO UPDATE SET window_start = excluded.window_start, "
    "requests = excluded.requests, tokens = excluded.tokens"
)


class SqliteKeyStore(KeyStore):
    def __init__(self, path: Path, busy_timeout_ms: int = 10_000) -> None:
        self._db = sqlite_file.Serialized(path, _SCHEMA, busy_timeout_ms)

    async def add(self, key: ApiKey) -> None:
        sql = f"INSERT INTO api_keys ({', '.join(KEY_COLUMNS)}) VALUES ({','.join('?' * 11)})"
        await self._db.run(lambda db: durably(db, sql, key.to_row()))

    async def by_hash(self, key_hash: str) -> ApiKey | None:
        rows = await self._db.run(
            lambda db: db.execute(_SELECT + "WHERE key_hash = ?", (key_hash,)).fetchall()
        )
        return ApiKey.from_row(rows[0]) if rows else None

    async def list(self) -> list[ApiKey]:
        rows = await self._db.run(
            lambda db: db.execute(_SELECT + "ORDER BY created_at, id").fetchall()
        )
        return [ApiKey.from_row(row) for row in rows]

    async def revoke(self, key_id: str, at: int) -> bool:
        sql = "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
        return await self._db.run(lambda db: durably(db, sql, (at, key_id)) > 0)

    async def touch(self, key_id: str, at: int) -> None:
        sql = "UPDATE api_keys SET last_used_at = ? WHERE id = ?"
        await self._db.run(lambda db: db.execute(sql, (at, key_id)))

    async def admit(
        self, key_id: str, lease_id: str, now: float, lease_until: float, decide: Decide
    ) -> Usage:
        def work(db: sqlite3.Connection) -> Usage:
            with Immediate(db):
                db.execute(
                    "DELETE FROM api_key_leases WHERE key_id = ? AND expires_at <= ?",
                    (key_id, now),
                )
                seen = _usage(db, key_id, now)
                stored = decide(seen)
                if stored is not None:
                    db.execute(
                        _UPSERT_USAGE, (key_id, stored.window, stored.requests, stored.tokens)
                    )
                    db.execute(
                        "INSERT INTO api_key_leases (id, key_id, expires_at) VALUES (?,?,?)",
                        (lease_id, key_id, lease_until),
                    )
                return seen

        return await self._db.run(work)

    async def settle(self, key_id: str, lease_id: str, now: float, adjust: Adjust) -> None:
        def work(db: sqlite3.Connection) -> None:
            with Immediate(db):
                stored = adjust(_usage(db, key_id, now))
                db.execute(_UPSERT_USAGE, (key_id, stored.window, stored.requests, stored.tokens))
                db.execute("DELETE FROM api_key_leases WHERE id = ?", (lease_id,))

        await self._db.run(work)

    async def usage(self, key_id: str, now: float) -> Usage:
        return await self._db.run(lambda db: _usage(db, key_id, now))

    async def close(self) -> None:
        await self._db.close()


def _usage(db: sqlite3.Connection, key_id: str, now: float) -> Usage:
    row = db.execute(
        "SELECT window_start, requests, tokens FROM api_key_usage WHERE key_id = ?", (key_id,)
    ).fetchone()
    (in_flight,) = db.execute(
        "SELECT COUNT(*) FROM api_key_leases WHERE key_id = ? AND expires_at > ?", (key_id, now)
    ).fetchone()
    if row is None:
        return Usage(in_flight=in_flight)
    return Usage(window=row[0], requests=row[1], tokens=row[2], in_flight=in_flight)
