"""Tenant-wide limits in the limiter (a real SQLite key store, its counters
shared or local, and a hand-held clock): all a tenant's keys count against
its `max_concurrent` and `tpm`, refused with the same 429s as a key's, and a
key's refusal after its tenant's admission leaves the tenant nothing
reserved."""

from __future__ import annotations

import pytest

from axon.errors import RateLimitError, TokenRateLimitError
from cortex.auth.limiter import Limiter, tenant_counter
from cortex.auth.limits import Limits
from cortex.auth.local_usage import counters_for
from cortex.auth.principal import Principal
from cortex.routing.tenant_policy import FixedTenantPolicies, TenantPolicy
from cortex.store.keys import KeyStore
from cortex.store.sqlite_keys import SqliteKeyStore
from harness.clock import ManualClock as Clock

T0 = 1_800_000_000.0
ACME = tenant_counter("acme")


@pytest.fixture(params=["shared", "local"])
def store(request: pytest.FixtureRequest, store: SqliteKeyStore) -> KeyStore:
    return counters_for(store, local=request.param == "local")


def _limiter(store: KeyStore, **policy: int) -> Limiter:
    policies = FixedTenantPolicies({"acme": TenantPolicy(**policy)})  # type: ignore[arg-type]
    return Limiter(store, Clock(T0 + 1), lease_s=600, policies=policies)


def _key(key_id: str, tenant: str = "acme", **limits: int) -> Principal:
    return Principal(tenant=tenant, key_id=key_id, limits=Limits(**limits))


async def test_concurrency_counts_every_key_of_the_tenant(store: KeyStore) -> None:
    limiter = _limiter(store, max_concurrent=2)
    first = await limiter.admit(_key("key_a"), 10)
    await limiter.admit(_key("key_b"), 10)
    with pytest.raises(RateLimitError, match="concurrent requests for this tenant: limit 2"):
        await limiter.admit(_key("key_c"), 10)
    # Another tenant is not counted with acme.
    await limiter.admit(_key("key_z", tenant="other"), 10)
    first.release()
    await limiter.drain()
    await limiter.admit(_key("key_c"), 10)


async def test_tokens_count_every_key_of_the_tenant(store: KeyStore) -> None:
    limiter = _limiter(store, tpm=100)
    admission = await limiter.admit(_key("key_a"), 60)
    assert admission.headers["x-ratelimit-remaining-tokens"] == "40"
    with pytest.raises(TokenRateLimitError, match="tokens per minute of this tenant: limit 100"):
        await limiter.admit(_key("key_b"), 60)
    admission.part_ended(10)  # settled to what it used: 90 left
    await limiter.drain()
    await limiter.admit(_key("key_b"), 60)
    assert (await store.usage(ACME, T0 + 1)).tokens == 70


async def test_a_key_refusal_leaves_the_tenant_nothing_reserved(store: KeyStore) -> None:
    limiter = _limiter(store, tpm=1000, max_concurrent=5)
    await limiter.admit(_key("key_a", rpm=1), 100)
    with pytest.raises(RateLimitError, match="requests per minute"):
        await limiter.admit(_key("key_a", rpm=1), 100)
    await limiter.drain()
    usage = await store.usage(ACME, T0 + 1)
    assert (usage.tokens, usage.in_flight) == (100, 1)


async def test_a_tenant_limit_applies_to_keys_without_limits(store: KeyStore) -> None:
    limiter = _limiter(store, max_concurrent=1)
    assert limiter.applies(_key("key_a"))
    assert not limiter.applies(_key("key_z", tenant="other"))
    await limiter.admit(_key("key_a"), 0)
    with pytest.raises(RateLimitError):
        await limiter.check(_key("key_b"))
    headers = await limiter.headers(_key("key_b"))
    assert headers["x-ratelimit-remaining-concurrent-requests"] == "0"


async def test_the_headers_show_the_tighter_of_tenant_and_key(store: KeyStore) -> None:
    limiter = _limiter(store, tpm=500)
    admission = await limiter.admit(_key("key_a", tpm=2000, rpm=10), 100)
    assert admission.headers["x-ratelimit-limit-tokens"] == "500"
    assert admission.headers["x-ratelimit-remaining-tokens"] == "400"
    assert admission.headers["x-ratelimit-limit-requests"] == "10"
