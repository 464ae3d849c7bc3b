"""The store-backed tenant policies: rows read once and then again on each
refresh, defaults for a tenant without one, and the last rows kept while
the store cannot be read."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cortex.auth.tenant_policies import StoreTenantPolicies
from cortex.routing.tenant_policy import DEFAULT_POLICY, FixedTenantPolicies, TenantPolicy
from cortex.store.sqlite_tenants import SqliteTenantStore
from cortex.store.tenants import Tenant


@pytest.fixture
async def tenants(tmp_path: Path) -> AsyncIterator[SqliteTenantStore]:
    store = SqliteTenantStore(tmp_path / "responses.sqlite3")
    yield store
    await store.close()


async def test_a_change_is_seen_at_the_next_refresh(tenants: SqliteTenantStore) -> None:
    policies = StoreTenantPolicies(tenants, refresh_s=2.0)
    await tenants.put(Tenant("acme", weight=3.0, max_priority="interactive", tpm=100))
    assert policies.policy("acme") == DEFAULT_POLICY  # not read yet
    await policies.refresh()
    assert policies.policy("acme") == TenantPolicy(3.0, "interactive", None, 100)
    assert policies.policy("nobody") == DEFAULT_POLICY
    await tenants.put(Tenant("acme", weight=0.5))
    await policies.refresh()
    assert policies.policy("acme") == TenantPolicy(0.5)


async def test_a_failed_refresh_keeps_the_last_rows(tenants: SqliteTenantStore) -> None:
    policies = StoreTenantPolicies(tenants, refresh_s=2.0)
    await tenants.put(Tenant("acme", weight=3.0))
    await policies.refresh()
    await tenants.close()
    with pytest.raises(Exception):  # noqa: B017 - whatever a closed connection raises
        await policies.refresh()
    assert policies.policy("acme").weight == 3.0


async def test_a_tenant_without_a_row_gets_the_settings_policy(tenants: SqliteTenantStore) -> None:
    static = FixedTenantPolicies({"acme": TenantPolicy(2.0), "beta": TenantPolicy(5.0)})
    policies = StoreTenantPolicies(tenants, refresh_s=2.0, fallback=static)
    await tenants.put(Tenant("acme", weight=3.0))
    await policies.refresh()
    assert policies.policy("acme") == TenantPolicy(3.0)  # the store's row wins
    assert policies.policy("beta") == TenantPolicy(5.0)
    assert policies.policy("nobody") == DEFAULT_POLICY
