"""Rate-limit counters in this process's memory in front of a real SQLite
key store: keys still come from the store, counters never reach it, leases
expire."""

from __future__ import annotations

from cortex.auth.local_usage import LocalUsage, counters_for
from cortex.store.keys import ApiKey, Usage
from cortex.store.sqlite_keys import SqliteKeyStore

WINDOW = 1_800_000_000


def _add(usage: Usage) -> Usage:
    return Usage(usage.window or WINDOW, usage.requests + 1, usage.tokens + 10, 0)


async def test_keys_are_the_stores_and_counters_stay_in_memory(store: SqliteKeyStore) -> None:
    local = LocalUsage(store)
    key = ApiKey(id="key_l", tenant="acme", key_hash="h", created_at=1)
    await local.add(key)
    assert await store.by_hash("h") == key  # written through
    assert await local.by_hash("h") == key
    seen = await local.admit("key_l", "lease-1", WINDOW + 1.0, WINDOW + 60.0, _add)
    assert seen == Usage()
    assert await local.usage("key_l", WINDOW + 2.0) == Usage(WINDOW, 1, 10, 1)
    assert await store.usage("key_l", WINDOW + 2.0) == Usage()  # never reached the store
    await local.settle("key_l", "lease-1", WINDOW + 3.0, lambda u: Usage(u.window, 1, 4, 0))
    assert await local.usage("key_l", WINDOW + 4.0) == Usage(WINDOW, 1, 4, 0)
    assert await local.revoke("key_l", 5)
    assert (await store.by_hash("h")) is not None
    assert [k.revoked_at for k in await store.list()] == [5]


async def test_a_refusal_changes_nothing_and_takes_no_lease(store: SqliteKeyStore) -> None:
    local = LocalUsage(store)
    await local.admit("key_r", "lease-1", WINDOW + 1.0, WINDOW + 60.0, lambda _u: None)
    assert await local.usage("key_r", WINDOW + 1.0) == Usage()


async def test_a_lease_never_settled_frees_its_slot_when_it_expires(
    store: SqliteKeyStore,
) -> None:
    local = LocalUsage(store)
    await local.admit("key_e", "lease-1", WINDOW + 1.0, WINDOW + 30.0, _add)
    assert (await local.usage("key_e", WINDOW + 29.0)).in_flight == 1
    assert (await local.usage("key_e", WINDOW + 30.0)).in_flight == 0


async def test_counters_for_wraps_only_when_local(store: SqliteKeyStore) -> None:
    assert counters_for(store, local=False) is store
    assert isinstance(counters_for(store, local=True), LocalUsage)
