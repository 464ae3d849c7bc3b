"""The settings of the store's upkeep (upkeep.py), apart from it: cortex's
settings, read by every `neuraxis` command to build its flags, come without
the Responses API's runs and FastAPI."""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat

from axon.settings import SettingsGroup


class UpkeepSettings(SettingsGroup):
    """How long stored responses are kept, and the
    leases of the running ones."""

    ttl_days: NonNegativeFloat = Field(
        30.0,
        description="stored responses are deleted this many days after they were created "
        "(0: kept forever)",
    )
    purge_interval_s: PositiveFloat = Field(
        3600.0,
        description="how often expired stored responses are purged; one instance (or worker) "
        "sharing the store does it at a time",
    )
    max_stored_bytes_per_tenant: NonNegativeInt = Field(
        1 << 30,
        description="bytes one tenant's stored responses may take in the store (their JSON); "
        "once over, a request with store = true is refused with 429 insufficient_quota until "
        "some are deleted or expire (0: no quota). Checked against a count at most "
        "2 seconds old",
    )
    lease_s: PositiveFloat = Field(
        30.0,
        description="a running stored response whose instance has not renewed its lease for "
        "this long (renewed every third of it) is marked failed by any instance sharing the store",
    )

    @property
    def renew_s(self) -> float:
        return self.lease_s / 3
