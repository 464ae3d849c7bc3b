"""cortex's [auth] settings: who may call the API (the authenticator and
the exposure check), the limits of keys that name none, and where the rate
limiter keeps its counters."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat

from axon.settings import SettingsGroup
from cortex.auth.limits import Limits


class AuthSettings(SettingsGroup):
    """Who may call the API, the limits of keys that name none, and where
    rate-limit counters live."""

    mode: Literal["off", "required"] = Field(
        "off",
        description="required: every /v1 request needs `Authorization: Bearer <key>` "
        "(keys: `neuraxis keys create`, kept in the same store as stored responses); off: "
        "one anonymous tenant, allowed on a loopback address only (see allow_unauthenticated)",
    )
    allow_unauthenticated: bool = Field(
        False,
        description="serve with auth off on a non-loopback address (only behind a proxy "
        "that authenticates clients itself)",
    )
    rate_limit_counters: Literal["auto", "local", "shared"] = Field(
        "auto",
        description="where per-key rate-limit counters live: shared (in the key store, exact "
        "across workers and instances), local (in this process's memory: no store round trip "
        "per request, exact within the process, forgotten on restart); auto: local with one "
        "worker on SQLite, else shared",
    )
    cache_s: PositiveFloat = Field(
        2.0,
        description="how long a looked-up API key is trusted before it is read again: a "
        "revocation takes effect within this many seconds",
    )
    default_rpm: int | None = Field(
        None,
        gt=0,
        description="requests per minute of a key made without --rpm (unset: no limit); "
        "give every cortex the same, as `neuraxis keys list` reads it from this file",
    )
    default_tpm: int | None = Field(
        None, gt=0, description="tokens per minute of a key made without --tpm (unset: no limit)"
    )
    default_max_concurrent: int | None = Field(
        None,
        gt=0,
        description="requests in flight at once of a key made without --max-concurrent "
        "(unset: no limit)",
    )

    def default_limits(self) -> Limits:
        """The limits of a key that names none of its own."""
        return Limits(self.default_rpm, self.default_tpm, self.default_max_concurrent)
