"""cortex's [auth] settings: who may call the API (the authenticator and
the exposure check), the limits of keys that name none, and where the rate
limiter keeps its counters."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveFloat

from axon.settings import SettingsGroup
from cortex.auth.limits import Limits


def _default_limit(limit: str, flag: str, more: str = "") -> Any:
    """The field of a key limit's default: unset (no limit) or positive;
    `flag` is the `neuraxis keys create` option that sets it per key."""
    description = f"{limit} of a key made without {flag} (unset: no limit){more}"
    return Field(None, gt=0, description=description)


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
    default_rpm: int | None = _default_limit(
        "requests per minute",
        "--rpm",
        "; give every cortex the same, as `neuraxis keys list` reads it from this file",
    )
    default_tpm: int | None = _default_limit("tokens per minute", "--tpm")
    default_max_concurrent: int | None = _default_limit(
        "requests in flight at once", "--max-concurrent"
    )

    def default_limits(self) -> Limits:
        """The limits of a key that names none of its own."""
        return Limits(self.default_rpm, self.default_tpm, self.default_max_concurrent)
