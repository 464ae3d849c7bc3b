"""The Responses store's upkeep, run by every cortex process (each worker
of `--workers N` too): renew the leases of the runs it runs, end the runs
whose lease expired, purge what is past its retention.

- Leases: every `lease_s / 3` a process renews the leases of its running
  stored runs (background, and streamed stored). A run whose row is no
  longer running was deleted (by another worker or instance) or failed by
  another after its lease expired: it is stopped, and stores nothing more.
- Expired leases: a running response whose lease ended (its process was
  killed, or lost the store for longer than the lease) is ended as failed,
  its open items closed, by whichever process sees it first; a replay
  (routes.py) does the same for the response it follows.
- Retention: every `purge_interval_s`, the process holding the store's
  "purge" job lease (`ResponseStore.claim`, a row in the store both
  backends keep, so one holder per store across workers and instances;
  another takes over once it lapses) deletes the responses created more than
  `ttl_days` ago. `ttl_days = 0` keeps them forever. At the same interval
  every process measures the store's size (`neuraxis_store_bytes`).

Each step's failure is logged and counted (`neuraxis_store_errors_total`)
and tried again at the next tick. What a run does when stopped: run.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from cortex.api.responses import run as runs
from cortex.api.responses.upkeep_settings import UpkeepSettings
from cortex.api.upkeep_loop import upkeep_loop
from cortex.recording import Recorder
from cortex.store.base import ResponseStore, StoredResponse

log = logging.getLogger("neuraxis.cortex")

PURGE_JOB = "purge"
_DAY_S = 86_400


def lease_expired() -> runs.LeaseExpiredError:
    return runs.LeaseExpiredError(
        "The cortex instance running this response stopped (its lease expired)."
    )


async def fail_expired(store: ResponseStore, record: StoredResponse, recorder: Recorder) -> None:
    """End a response whose lease expired as failed."""
    await runs.fail(store, record, lease_expired(), recorder)
    recorder.lease_expired(store.backend)
    log.warning("response failed: its lease expired", extra={"request_id": record.id})


class Upkeep:
    def __init__(
        self,
        store: ResponseStore,
        instance: str,
        local_runs: Callable[[], Iterable[runs.ResponseRun]],
        settings: UpkeepSettings,
        clock: Callable[[], float] = time.time,
        *,
        recorder: Recorder,
    ) -> None:
        self._store, self._instance, self._runs = store, instance, local_runs
        self._recorder = recorder
        self._settings, self._clock = settings, clock

    async def renew(self) -> int:
        """Renew this process's leases; stop the runs that lost their row.
        Returns how many were stopped."""
        mine = [r for r in self._runs() if r.running and r.owner == self._instance]
        if not mine:
            return 0
        until = self._clock() + self._settings.lease_s
        alive = await self._store.renew(self._instance, [r.response_id for r in mine], until)
        stopped = [r for r in mine if r.response_id not in alive and r.running]
        for run in stopped:
            log.info("stopped: deleted or ended elsewhere", extra={"request_id": run.response_id})
            run.stop()
        return len(stopped)

    async def expire(self) -> int:
        """End the runs whose lease expired; returns how many."""
        expired = await self._store.expired(self._clock())
        for record in expired:
            await fail_expired(self._store, record, self._recorder)
        return len(expired)

    async def purge(self) -> int:
        """Purge what is past retention, if this process holds the job."""
        if self._settings.ttl_days <= 0:
            return 0
        now = self._clock()
        # The job lease outlives one interval, so the holder keeps it from
        # one purge to the next, and another takes over when it stops.
        until = now + 2 * self._settings.purge_interval_s
        if not await self._store.claim(PURGE_JOB, self._instance, now, until):
            return 0
        started = time.perf_counter()
        count = await self._store.purge(int(now - self._settings.ttl_days * _DAY_S))
        self._recorder.purged(self._store.backend, count)
        if count:
            log.info("purged %d expired responses in %.2f s", count, time.perf_counter() - started)
        return count

    async def measure(self) -> int:
        """Record the store's size; returns it."""
        size = await self._store.stored_bytes()
        self._recorder.store_size(self._store.backend, size)
        return size

    async def forever(self) -> None:
        """Run every step at its interval until cancelled."""
        steps = [("renew", self.renew), ("expire", self.expire)]
        slow = [("purge", self.purge), ("measure", self.measure)]
        interval = self._settings.purge_interval_s
        await upkeep_loop(self._settings.renew_s, steps, interval, slow, self._failed)

    def _failed(self, op: str) -> None:
        log.exception("store upkeep failed: %s", op)
        self._recorder.store_error(self._store.backend, op)
