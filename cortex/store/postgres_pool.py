"""The connection pool a PostgreSQL store opens on first use, with its
schema: what the key store and the tenant store (postgres_keys.py,
postgres_tenants.py) share.

Made on first use, inside the server's event loop (asyncpg's pool belongs
to the loop that made it), and once, however many requests arrive
together. The schema is created under an advisory lock: instances starting
together would otherwise race on CREATE TABLE IF NOT EXISTS (a unique
violation in pg_type).
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg


class LazyPool:
    def __init__(self, dsn: str, schema: str, schema_lock: int, max_size: int) -> None:
        self._dsn, self._schema, self._lock_id, self._max_size = dsn, schema, schema_lock, max_size
        self._pool: Any = None
        self._opening = asyncio.Lock()

    async def get(self) -> Any:
        """The pool (an asyncpg.Pool), the schema made on the first call."""
        async with self._opening:
            if self._pool is None:
                pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=self._max_size)
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", self._lock_id)
                    await conn.execute(self._schema)
                self._pool = pool
        return self._pool

    async def close(self) -> None:
        """Close the pool if one was made; harmless twice."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()
