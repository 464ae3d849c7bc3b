"""The tenants' rows as admission and the limiter read them: a
`TenantPolicies` (cortex/routing/tenant_policy.py) over the store, kept in
memory and read again every `refresh_s` in the background, so that a look-up
never waits on the store and `neuraxis tenants set` takes effect on every
cortex instance within `refresh_s`, no restart.

Here rather than in routing/ or store/: those are siblings that cannot
import each other, and this is where the two meet. A refresh that fails
keeps the rows last read (and logs): a store that is briefly away changes
no tenant's weight or limits.
"""

from __future__ import annotations

import logging

from axon.periodic import every
from cortex.routing.tenant_policy import FixedTenantPolicies, TenantPolicies, TenantPolicy
from cortex.store.tenants import Tenant, TenantStore

log = logging.getLogger("neuraxis.cortex")


def policy_of(tenant: Tenant) -> TenantPolicy:
    return TenantPolicy(
        weight=tenant.weight,
        max_priority=tenant.max_priority,
        max_concurrent=tenant.max_concurrent,
        tpm=tenant.tpm,
    )


class StoreTenantPolicies:
    """A tenant's row in the store, else its policy in `fallback` (the
    settings' `[admission.tenants]` tables), else the defaults."""

    def __init__(
        self, store: TenantStore, refresh_s: float, fallback: TenantPolicies | None = None
    ) -> None:
        self._store, self._refresh_s = store, refresh_s
        self._fallback = fallback or FixedTenantPolicies()
        self._policies: dict[str, TenantPolicy] = {}

    def policy(self, tenant: str) -> TenantPolicy:
        found = self._policies.get(tenant)
        return found if found is not None else self._fallback.policy(tenant)

    async def refresh(self) -> None:
        """Read every tenant's row again (a tenant whose row is gone gets
        the defaults)."""
        rows = await self._store.tenants()
        self._policies = {row.name: policy_of(row) for row in rows}

    async def forever(self) -> None:
        """Refresh every `refresh_s` until cancelled."""
        failed = "reading the tenants failed; their last rows still apply"
        await every(self._refresh_s, self.refresh, log, failed)
