"""Rate-limit counters kept in this process's memory, for the one case
where nothing else shares them: a single cortex process (one uvicorn
worker) on the SQLite store.

There an admission in the store is a `BEGIN IMMEDIATE` transaction on a
thread (about 120 µs, half of it the hop to the thread and back) on the
path of every request of a limited key, and another one to settle it. In
memory the same read-decide-write is a few dictionary operations on the
event loop, atomic because nothing awaits between the read and the write:
exact, like the store, within the process that owns the counters.

`LocalUsage` wraps the key store: keys themselves (lookups, creation,
revocation, last use) still go to it, so `neuraxis keys` works as before;
only `admit`, `settle` and `usage` stay here. What changes against the
shared counters: a restart of cortex forgets the current window's counts
(a key may spend up to one more minute's budget in the minute of a
restart) and two cortex processes on one state directory would each count
on their own; `rate_limit_counters = "shared"` keeps the counters in the
store for that case, and `--workers N` or PostgreSQL always do
(`counters_for`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.store.keys import Adjust, ApiKey, Decide, KeyStore, Usage


@dataclass
class _Counts:
    window: int = 0
    requests: int = 0
    tokens: int = 0


class LocalUsage(KeyStore):
    def __init__(self, keys: KeyStore) -> None:
        self._keys = keys
        self._counts: dict[str, _Counts] = {}
        # Lease id → (key id, expiry): the key's requests in flight.
        self._leases: dict[str, tuple[str, float]] = {}
        self._in_flight: dict[str, dict[str, float]] = {}

    async def add(self, key: ApiKey) -> None:
        await self._keys.add(key)

    async def by_hash(self, key_hash: str) -> ApiKey | None:
        return await self._keys.by_hash(key_hash)

    async def list(self) -> list[ApiKey]:
        return await self._keys.list()

    async def revoke(self, key_id: str, at: int) -> bool:
        return await self._keys.revoke(key_id, at)

    async def touch(self, key_id: str, at: int) -> None:
        await self._keys.touch(key_id, at)

    async def close(self) -> None:
        await self._keys.close()

    def _usage(self, key_id: str, now: float) -> Usage:
        counts = self._counts.get(key_id) or _Counts()
        leases = self._in_flight.get(key_id, {})
        expired = [lease for lease, until in leases.items() if until <= now]
        for lease in expired:  # a request that never settled frees its slot
            del leases[lease]
            self._leases.pop(lease, None)
        return Usage(counts.window, counts.requests, counts.tokens, len(leases))

    def _store(self, key_id: str, usage: Usage) -> None:
        self._counts[key_id] = _Counts(usage.window, usage.requests, usage.tokens)

    async def admit(
        self, key_id: str, lease_id: str, now: float, lease_until: float, decide: Decide
    ) -> Usage:
        # No await from here on: the read-decide-write is atomic on the loop.
        seen = self._usage(key_id, now)
        decided = decide(seen)
        if decided is not None:
            self._store(key_id, decided)
            self._leases[lease_id] = (key_id, lease_until)
            self._in_flight.setdefault(key_id, {})[lease_id] = lease_until
        return seen

    async def settle(self, key_id: str, lease_id: str, now: float, adjust: Adjust) -> None:
        self.settle_now(key_id, lease_id, now, adjust)

    def settle_now(self, key_id: str, lease_id: str, now: float, adjust: Adjust) -> None:
        """`settle` without an await: nothing here needs one."""
        self._store(key_id, adjust(self._usage(key_id, now)))
        self._leases.pop(lease_id, None)
        self._in_flight.get(key_id, {}).pop(lease_id, None)

    async def usage(self, key_id: str, now: float) -> Usage:
        return self._usage(key_id, now)


def counters_for(keys: KeyStore, local: bool) -> KeyStore:
    """The store the limiter counts in: `keys` itself (shared by workers and
    instances), or counters in this process in front of it."""
    return LocalUsage(keys) if local else keys
