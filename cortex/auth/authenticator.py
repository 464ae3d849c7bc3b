"""Who is calling: the bearer key of a `/v1/...` request checked against the
key store, turned into a `Principal` (the FastAPI dependency that asks for
it on every API route is cortex/api/gateway.py's `authenticate`).

Keys are looked up in the store, so a key made by `neuraxis keys create`
works on its next request with no restart. A found key is cached for
`cache_s` (2 s by default): a revocation takes effect within that bound on
every instance. Unknown keys are not cached (a new key must work at once).
A cache refresh also records the key's last use, so `last used` is exact
to within `cache_s` and costs one write per key per `cache_s`, not one per
request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from axon.errors import AuthenticationError
from cortex.auth.keys import hash_key, hash_matches
from cortex.auth.limits import Limits
from cortex.auth.principal import Principal
from cortex.store.keys import ApiKey, KeyStore

log = logging.getLogger("neuraxis.cortex")

DEFAULT_CACHE_S = 2.0

_INCORRECT = "Incorrect API key provided."
_MISSING = (
    "You didn't provide an API key. You need to provide your API key in an "
    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)


@dataclass(frozen=True)
class _Cached:
    fetched_at: float
    record: ApiKey
    principal: Principal


def limits_of(record: ApiKey, defaults: Limits) -> Limits:
    """A key's limits: its own, and the cluster's defaults for those it
    does not name."""
    return Limits(
        rpm=record.rpm if record.rpm is not None else defaults.rpm,
        tpm=record.tpm if record.tpm is not None else defaults.tpm,
        max_concurrent=record.max_concurrent
        if record.max_concurrent is not None
        else defaults.max_concurrent,
    )


def principal_for(record: ApiKey, defaults: Limits | None = None) -> Principal:
    return Principal(
        tenant=record.tenant,
        key_id=record.id,
        models=frozenset(record.models),
        limits=limits_of(record, defaults or Limits()),
    )


def bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class Authenticator:
    def __init__(
        self,
        store: KeyStore,
        clock: Callable[[], float],
        cache_s: float = DEFAULT_CACHE_S,
        defaults: Limits | None = None,
    ) -> None:
        self._store, self._clock, self._cache_s = store, clock, cache_s
        self._defaults = defaults or Limits()  # of keys that name none
        self._cache: dict[str, _Cached] = {}

    async def principal(self, authorization: str | None) -> Principal:
        secret = bearer(authorization)
        if secret is None:
            raise AuthenticationError(_MISSING)
        now = self._clock()
        key_hash = hash_key(secret)
        cached = self._cache.get(key_hash)
        if cached is None or now - cached.fetched_at >= self._cache_s:
            cached = await self._fetch(key_hash, now)
        record = cached.record if cached is not None else None
        # Unknown, revoked and expired keys get the same answer: which one a
        # key is would tell a caller that it existed. The log says which.
        refused = None
        if record is None or not hash_matches(record, key_hash):
            refused = "unknown"
        elif record.revoked_at is not None:
            refused = "revoked"
        elif record.expires_at is not None and now >= record.expires_at:
            refused = "expired"
        if refused is not None or record is None:
            if record is not None:  # a key that exists: worth an operator's eye
                log.info("refused API key %s: %s", record.id, refused)
            raise AuthenticationError(_INCORRECT)
        return cached.principal if cached is not None else principal_for(record, self._defaults)

    async def _fetch(self, key_hash: str, now: float) -> _Cached | None:
        record = await self._store.by_hash(key_hash)
        if record is None:
            self._cache.pop(key_hash, None)
            return None
        if record.revoked_at is None:
            await self._store.touch(record.id, int(now))
        cached = _Cached(now, record, principal_for(record, self._defaults))
        self._cache[key_hash] = cached
        return cached
