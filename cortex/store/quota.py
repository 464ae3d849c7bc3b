"""Each tenant's share of the Responses store (issue 31 point 6): a request
that would store a response is refused with 429 `insufficient_quota` while
the tenant's stored responses take `max_stored_bytes_per_tenant` or more.
Without it one key stored 100 MiB in 6 s, kept for 30 days.

The count is the store's (`ResponseStore.stored_bytes`, one indexed query),
reused for `FRESH_S` so that a burst costs one query; meanwhile each request
let through adds its body's size to it (what it stores is about that, its
answer aside). A tenant can pass its quota by about one request, plus what
other cortex processes let through in `FRESH_S`, and then stores nothing
more.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from axon.errors import StoreQuotaError
from cortex.store.base import ResponseStore

FRESH_S = 2.0


class StoreQuota:
    def __init__(
        self,
        store: ResponseStore,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store, self._max_bytes, self._clock = store, max_bytes, clock
        self._counted: dict[str, tuple[float, int]] = {}  # tenant → (when, bytes)

    async def check(self, tenant: str, adding: int = 0) -> None:
        """Raise StoreQuotaError if `tenant` may store nothing more; else
        count `adding` bytes (the request's body) as stored."""
        if not self._max_bytes:
            return
        now = self._clock()
        counted = self._counted.get(tenant)
        if counted is None or now - counted[0] >= FRESH_S:
            counted = self._counted[tenant] = (now, await self._store.stored_bytes(tenant))
        if counted[1] >= self._max_bytes:
            raise StoreQuotaError(
                f"Your stored responses take {counted[1]} bytes, this server's quota for a "
                f"tenant is {self._max_bytes}: delete some (DELETE /v1/responses/{{id}}) or "
                "send 'store': false."
            )
        self._counted[tenant] = (counted[0], counted[1] + adding)
