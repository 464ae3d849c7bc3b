"""The `TenantStore` contract, run against SQLite and PostgreSQL as the key
store's is (test_keys_contract.py): tenants' rows, and the usage ledger's
flushes that add, from several stores on the same data at once (cortex
workers, or instances sharing PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from cortex.store.postgres_tenants import PostgresTenantStore
from cortex.store.sqlite_tenants import SqliteTenantStore
from cortex.store.tenants import HOUR_S, Tenant, TenantStore, UsageCounts, UsageKey
from tests.contract.cortex.store import backends

Opener = Callable[[], TenantStore]


@pytest.fixture
def store_classes() -> tuple[type[TenantStore], type[TenantStore]]:
    return SqliteTenantStore, PostgresTenantStore


def _key(tenant: str = "acme", model: str = "m1", hour: int = 10 * HOUR_S) -> UsageKey:
    return UsageKey(tenant, f"key_{tenant}", model, "default", hour)


def _counts(requests: int = 1, prompt: int = 10) -> UsageCounts:
    return UsageCounts(requests, prompt, 2, 5, 0, 1.5, 0.25)


async def test_a_tenant_reads_back_equal_and_is_replaced(store: TenantStore) -> None:
    assert await store.get("acme") is None
    first = Tenant("acme", weight=3.0, max_priority="interactive", max_concurrent=4, tpm=1000)
    await store.put(first)
    assert await store.get("acme") == first
    second = Tenant("acme", weight=0.5, max_priority="batch")
    await store.put(second)
    assert await store.get("acme") == second


async def test_list_is_by_name(store: TenantStore) -> None:
    for name in ["b", "c", "a"]:
        await store.put(Tenant(name))
    assert [t.name for t in await store.tenants()] == ["a", "b", "c"]


async def test_a_change_made_elsewhere_is_seen_at_once(open_store: Opener) -> None:
    cortex, cli = open_store(), open_store()
    assert await cortex.tenants() == []
    await cli.put(Tenant("acme", weight=2.0))
    assert await cortex.get("acme") == Tenant("acme", weight=2.0)


async def test_usage_flushes_add_up(store: TenantStore) -> None:
    await store.add_usage({_key(): _counts(1, 10), _key(model="m2"): _counts(2, 20)})
    await store.add_usage({_key(): _counts(3, 30)})
    rows = dict(await store.usage(0, 100 * HOUR_S))
    assert rows[_key()] == UsageCounts(4, 40, 4, 10, 0, 3.0, 0.5)
    assert rows[_key(model="m2")] == UsageCounts(2, 20, 2, 5, 0, 1.5, 0.25)


async def test_usage_is_filtered_by_hours_tenant_and_models(store: TenantStore) -> None:
    rows: dict[UsageKey, UsageCounts] = {
        _key(hour=h, tenant=t, model=m): _counts()
        for h in (HOUR_S, 2 * HOUR_S, 3 * HOUR_S)
        for t in ("a", "b")
        for m in ("m1", "m2", "m3")
    }
    await store.add_usage(rows)
    got = await store.usage(2 * HOUR_S, 3 * HOUR_S, tenant="a", models=["m1", "m3"])
    assert sorted(k for k, _ in got) == [_key("a", "m1", 2 * HOUR_S), _key("a", "m3", 2 * HOUR_S)]
    assert len(await store.usage(0, 10 * HOUR_S)) == 18
    assert [k.hour for k, _ in await store.usage(0, 10 * HOUR_S)] == sorted(k.hour for k in rows)


async def test_concurrent_flushes_from_several_stores_lose_nothing(open_store: Opener) -> None:
    stores = [open_store() for _ in range(3)]
    keys = [_key(model=m) for m in ("m1", "m2", "m3")]

    async def flush(store: TenantStore, turn: int) -> None:
        # Each flush touches the same rows, in a different order.
        rotated = keys[turn % 3 :] + keys[: turn % 3]
        await store.add_usage({k: _counts(1, 1) for k in rotated})

    await asyncio.gather(*(flush(s, i) for i in range(10) for s in stores))
    rows = dict(await stores[0].usage(0, 100 * HOUR_S))
    assert {k: c.requests for k, c in rows.items()} == {k: 30 for k in keys}


async def test_an_empty_flush_writes_nothing(store: TenantStore) -> None:
    await store.add_usage({})
    assert await store.usage(0, 100 * HOUR_S) == []


async def test_close_is_harmless_twice_and_unused(open_store: Opener) -> None:
    await backends.close_twice(open_store, lambda s: s.tenants())
