"""Bearer keys against a real key store (SQLite in a temporary directory) on
a hand-moved clock: the 401 cases, new keys at once, revocation within the
cache bound."""

from __future__ import annotations

import pytest

from axon.errors import AuthenticationError
from cortex.auth.authenticator import Authenticator, bearer
from cortex.auth.keys import KeyRequest, hash_key, make_key, matches
from cortex.auth.limits import Limits
from cortex.store.keys import KeyStore
from harness.clock import ManualClock as Clock


async def _new(store: KeyStore, now: float, **fields: object) -> str:
    request = KeyRequest(tenant="acme", models=[], **fields)  # type: ignore[arg-type]
    secret, record = make_key(request, int(now))
    await store.add(record)
    return secret


def test_a_key_is_nx_and_256_random_bits_and_only_its_hash_is_kept() -> None:
    secret, record = make_key(KeyRequest(tenant="acme", models=["m"]), 100)
    assert secret.startswith("nx-") and len(secret) == 3 + 43
    assert secret not in record.to_row()
    assert record.key_hash == hash_key(secret) and matches(record, secret)
    assert not matches(record, secret + "x")
    other, _ = make_key(KeyRequest(tenant="acme", models=[]), 100)
    assert other != secret


def test_bearer_takes_the_token_of_a_bearer_header_only() -> None:
    assert bearer("Bearer nx-abc") == "nx-abc"
    assert bearer("bearer   nx-abc ") == "nx-abc"
    assert bearer("Basic dXNlcjpw") is None
    assert bearer("Bearer ") is None
    assert bearer(None) is None


async def test_a_valid_key_is_its_tenant_with_its_models_and_limits(store: KeyStore) -> None:
    clock = Clock(1000.0)
    request = KeyRequest(tenant="acme", models=["m1"], rpm=5, tpm=50, max_concurrent=2)
    secret, record = make_key(request, 1000)
    await store.add(record)
    principal = await Authenticator(store, clock).principal(f"Bearer {secret}")
    assert principal.tenant == "acme" and principal.key_id == record.id
    assert principal.models == frozenset({"m1"})
    assert principal.limits == Limits(rpm=5, tpm=50, max_concurrent=2)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "You didn't provide an API key"),
        ("Basic abc", "You didn't provide an API key"),
        ("Bearer nx-unknown", "Incorrect API key provided"),
    ],
)
async def test_missing_or_unknown_keys_are_refused(
    store: KeyStore, header: str | None, message: str
) -> None:
    with pytest.raises(AuthenticationError, match=message):
        await Authenticator(store, Clock(1000.0)).principal(header)


async def test_an_expired_key_is_refused_from_its_expiry_on(store: KeyStore) -> None:
    clock = Clock(1000.0)
    secret = await _new(store, clock.now, expires_days=1)
    auth = Authenticator(store, clock)
    await auth.principal(f"Bearer {secret}")
    clock.now += 86_400
    # The same answer as an unknown key's: which a key is is the log's.
    with pytest.raises(AuthenticationError, match=r"^Incorrect API key provided\.$"):
        await auth.principal(f"Bearer {secret}")


async def test_a_key_made_after_start_works_on_the_next_request(store: KeyStore) -> None:
    clock = Clock(1000.0)
    auth = Authenticator(store, clock)
    with pytest.raises(AuthenticationError):
        await auth.principal("Bearer nx-not-yet")
    secret = await _new(store, clock.now)
    assert (await auth.principal(f"Bearer {secret}")).tenant == "acme"


async def test_a_revocation_takes_effect_within_the_cache_bound(store: KeyStore) -> None:
    clock = Clock(1000.0)
    secret = await _new(store, clock.now)
    auth = Authenticator(store, clock, cache_s=2.0)
    await auth.principal(f"Bearer {secret}")
    (record,) = await store.list()
    await store.revoke(record.id, int(clock.now))
    clock.now += 2.0
    with pytest.raises(AuthenticationError, match=r"^Incorrect API key provided\.$"):
        await auth.principal(f"Bearer {secret}")


async def test_last_use_is_recorded_once_per_cache_period(store: KeyStore) -> None:
    clock = Clock(1000.0)
    secret = await _new(store, clock.now)
    auth = Authenticator(store, clock, cache_s=2.0)
    await auth.principal(f"Bearer {secret}")
    clock.now = 1001.0
    await auth.principal(f"Bearer {secret}")
    (record,) = await store.list()
    assert record.last_used_at == 1000
    clock.now = 1005.0
    await auth.principal(f"Bearer {secret}")
    (record,) = await store.list()
    assert record.last_used_at == 1005


async def test_a_key_that_names_no_limits_gets_the_defaults(store: KeyStore) -> None:
    secret, record = make_key(KeyRequest("acme", [], tpm=500), 1000)
    await store.add(record)
    defaults = Limits(rpm=60, tpm=10_000, max_concurrent=2)
    auth = Authenticator(store, Clock(1000.0), defaults=defaults)
    principal = await auth.principal(f"Bearer {secret}")
    assert principal.limits == Limits(rpm=60, tpm=500, max_concurrent=2)
