"""cortex's [tenancy] settings: how often the tenants' rows are read again
(cortex/auth/tenant_policies.py) and the usage ledger (cortex/store/ledger.py)."""

from __future__ import annotations

from pydantic import Field, PositiveFloat

from axon.settings import SettingsGroup


class TenancySettings(SettingsGroup):
    """Tenants' rows (weights, classes, tenant limits) and the usage ledger."""

    refresh_s: PositiveFloat = Field(
        2.0,
        description="how often every cortex reads the tenants' rows again: a `neuraxis tenants "
        "set` takes effect within this many seconds, no restart",
    )
    ledger: bool = Field(
        True,
        description="add every finished request to the usage ledger in the store (`neuraxis "
        "usage`, GET /v1/usage on the admin listener)",
    )
    ledger_flush_s: PositiveFloat = Field(
        2.0,
        description="how often the ledger's counts are written to the store, in one "
        "transaction; a crash loses at most the requests of this many seconds",
    )
