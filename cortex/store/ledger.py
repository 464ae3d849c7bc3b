"""The usage ledger's writer: every finished request is added to an
in-memory accumulator (a dictionary update on the event loop, no I/O on the
request's path), and the accumulator is written to the store every
`flush_s` seconds and at shutdown, in one transaction of upserts that add
(cortex/store/tenants.py).

What a crash can lose: the requests that ended since the last flush, at
most `flush_s` seconds of them (2 by default), plus a flush under way. A
flush that fails (the store briefly away) puts its counts back, to be
written with the next one; nothing is counted twice, since a transaction
that failed wrote nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from axon.periodic import every
from cortex.store.tenants import TenantStore, UsageCounts, UsageKey

log = logging.getLogger("neuraxis.cortex")


class Ledger:
    def __init__(
        self, store: TenantStore, flush_s: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store, self._flush_s, self.clock = store, flush_s, clock
        self._pending: dict[UsageKey, UsageCounts] = {}
        self._flushing = asyncio.Lock()

    def add(self, key: UsageKey, counts: UsageCounts) -> None:
        """Count one request (or several) toward `key`'s row."""
        row = self._pending.get(key)
        if row is None:
            self._pending[key] = counts
        else:
            row.add(counts)

    async def flush(self) -> None:
        """Write what was counted since the last flush."""
        async with self._flushing:
            pending, self._pending = self._pending, {}
            if not pending:
                return
            try:
                await self.store.add_usage(pending)
            except BaseException:
                for key, counts in pending.items():  # for the next flush
                    self.add(key, counts)
                raise

    async def forever(self) -> None:
        """Flush every `flush_s` until cancelled (then flush once more:
        the caller awaits the cancelled task at shutdown)."""
        try:
            failed = "writing the usage ledger failed; kept for the next flush"
            await every(self._flush_s, self.flush, log, failed)
        finally:
            try:
                await self.flush()
            except Exception:
                # At shutdown nothing is left to retry: say what was lost.
                lost = sum(c.requests for c in self._pending.values())
                log.exception("the usage ledger's last flush failed: %d requests not written", lost)
