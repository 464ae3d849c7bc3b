"""The `KeyStore` contract, run against SQLite and PostgreSQL as the
Responses store's is (test_contract.py): keys, revocation, last use, and
the atomic admission and settlement the rate limiter relies on, including
several stores on the same data at once (cortex workers, or instances
sharing PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from cortex.store.keys import ApiKey, KeyStore, Usage
from cortex.store.postgres_keys import PostgresKeyStore
from cortex.store.sqlite_keys import SqliteKeyStore
from tests.contract.cortex.store import backends

Opener = Callable[[], KeyStore]


@pytest.fixture
def store_classes() -> tuple[type[KeyStore], type[KeyStore]]:
    return SqliteKeyStore, PostgresKeyStore


def _key(key_id: str, *, created_at: int = 100, **fields: object) -> ApiKey:
    return ApiKey(
        id=key_id,
        tenant=f"tenant-{key_id}",
        key_hash=f"hash-{key_id}",
        created_at=created_at,
        **fields,  # type: ignore[arg-type]
    )


async def test_a_key_reads_back_equal_by_its_hash(store: KeyStore) -> None:
    key = _key("key_a", models=["m1", "m2"], rpm=10, tpm=1000, max_concurrent=2, expires_at=999)
    await store.add(key)
    assert await store.by_hash("hash-key_a") == key
    assert await store.by_hash("hash-other") is None


async def test_list_is_oldest_first(store: KeyStore) -> None:
    for key_id, created in [("key_b", 20), ("key_c", 30), ("key_a", 10)]:
        await store.add(_key(key_id, created_at=created))
    assert [k.id for k in await store.list()] == ["key_a", "key_b", "key_c"]


async def test_revoke_marks_the_key_once(store: KeyStore) -> None:
    await store.add(_key("key_a"))
    assert await store.revoke("key_a", 555) is True
    assert await store.revoke("key_a", 556) is False
    assert await store.revoke("key_never", 557) is False
    got = await store.by_hash("hash-key_a")
    assert got is not None and got.revoked_at == 555


async def test_touch_records_the_last_use(store: KeyStore) -> None:
    await store.add(_key("key_a"))
    await store.touch("key_a", 777)
    got = await store.by_hash("hash-key_a")
    assert got is not None and got.last_used_at == 777


async def test_a_key_made_elsewhere_is_seen_at_once(open_store: Opener) -> None:
    cortex, cli = open_store(), open_store()
    assert await cortex.by_hash("hash-key_a") is None
    await cli.add(_key("key_a"))
    assert await cortex.by_hash("hash-key_a") == _key("key_a")


async def test_an_unknown_key_has_no_usage(store: KeyStore) -> None:
    assert await store.usage("key_a", 10.0) == Usage()


async def test_admit_stores_what_decide_returns_and_takes_a_lease(store: KeyStore) -> None:
    seen = await store.admit("key_a", "lease1", 10.0, 100.0, lambda u: Usage(60, 1, 50))
    assert seen == Usage()
    assert await store.usage("key_a", 11.0) == Usage(60, 1, 50, in_flight=1)


async def test_a_refusal_changes_nothing(store: KeyStore) -> None:
    await store.admit("key_a", "lease1", 10.0, 100.0, lambda u: Usage(60, 1, 50))
    seen = await store.admit("key_a", "lease2", 10.0, 100.0, lambda u: None)
    assert seen == Usage(60, 1, 50, in_flight=1)
    assert await store.usage("key_a", 11.0) == Usage(60, 1, 50, in_flight=1)


async def test_settle_stores_the_adjustment_and_drops_the_lease(store: KeyStore) -> None:
    await store.admit("key_a", "lease1", 10.0, 100.0, lambda u: Usage(60, 1, 500))
    await store.settle("key_a", "lease1", 12.0, lambda u: Usage(u.window, u.requests, 42))
    assert await store.usage("key_a", 13.0) == Usage(60, 1, 42, in_flight=0)


async def test_an_expired_lease_no_longer_counts(store: KeyStore) -> None:
    await store.admit("key_a", "lease1", 10.0, 20.0, lambda u: Usage(60, 1, 5))
    assert (await store.usage("key_a", 19.0)).in_flight == 1
    assert (await store.usage("key_a", 20.0)).in_flight == 0
    seen = await store.admit("key_a", "lease2", 21.0, 30.0, lambda u: u)
    assert seen.in_flight == 0


async def test_keys_count_apart(store: KeyStore) -> None:
    await store.admit("key_a", "lease1", 10.0, 100.0, lambda u: Usage(60, 1, 5))
    assert await store.usage("key_b", 10.0) == Usage()


async def test_concurrent_admissions_from_several_stores_never_overshoot(
    open_store: Opener,
) -> None:
    """Three stores on the same data (three workers or instances), 60
    admissions at once against a budget of 1000 tokens at 70 each: the
    read-decide-write is atomic, so exactly 14 fit and the stored total is
    what was admitted."""
    stores = [open_store() for _ in range(3)]
    admitted: list[int] = []

    def decide(usage: Usage) -> Usage | None:
        if usage.tokens + 70 > 1000:
            return None
        return Usage(60, usage.requests + 1, usage.tokens + 70)

    async def one(i: int) -> None:
        store = stores[i % 3]
        seen = await store.admit("key_a", f"lease{i}", 10.0, 100.0, decide)
        if seen.tokens + 70 <= 1000:
            admitted.append(70)

    await asyncio.gather(*(one(i) for i in range(60)))
    assert sum(admitted) == 14 * 70
    final = await stores[0].usage("key_a", 11.0)
    assert (final.tokens, final.requests, final.in_flight) == (14 * 70, 14, 14)


async def test_keys_survive_close_and_reopen(open_store: Opener) -> None:
    first = open_store()
    await first.add(_key("key_a", rpm=3))
    await first.revoke("key_a", 9)
    await first.close()
    got = await open_store().by_hash("hash-key_a")
    assert got is not None and got.rpm == 3 and got.revoked_at == 9


async def test_close_is_harmless_unused_or_twice(open_store: Opener) -> None:
    await backends.close_twice(open_store, lambda used: used.add(_key("key_a")))
