"""Requests for a model scaled to zero: they wait here while it wakes.

A model whose `[models.autoscale]` allows `min_replicas = 0` may have no
ready replica and still be served: its requests wait (bounded by the
admission queue's size, for at most the wake timeout) until a replica is
ready, then go on to admission and the routing policy as any other. What
wakes the model is the controller's: cortex reports the waiting requests
with its queue depths (`waiting`, in the report cortex/cluster/client.py
sends), at once rather than at the next interval (`on_wake`), and the
controller raises the model's count from zero (cortex/cluster/autoscale.py).

A request that waited carries how long in `ColdStart` (the response's
`x-neuraxis-cold-start-ms`, cortex/http/cold_start.py). One that waits past
the timeout gets 503 `unavailable` with Retry-After and a message that
says the model is starting. Time comes from a clock and a sleep passed in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from axon.errors import ModelOverloadedError, UnavailableError
from cortex import metrics
from cortex.routing.timer import set_within

Sleep = Callable[[float], Awaitable[None]]
# A request refused after the wake timeout is told to retry after this.
RETRY_AFTER_S = 10


@dataclass
class ColdStart:
    """Set per HTTP request by the edge; the wait of a woken model's
    request goes into `ms` (a holder, so that the request's tasks all see
    the one object whichever context they copied)."""

    ms: int | None = None


cold_start: ContextVar[ColdStart | None] = ContextVar("neuraxis_cold_start", default=None)


@dataclass
class _Wake:
    """One model's wake: when its first request came, and the signal its
    waiters wait on."""

    started: float
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: int = 0


class Wakes:
    def __init__(
        self,
        *,
        ready: Callable[[str], bool],
        timeout_s: Callable[[str], float],
        max_waiting: int,
        clock: Callable[[], float],
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """`ready(model)`: a ready replica serves it; `timeout_s(model)`: how
        long its requests may wait for one; `max_waiting`: per model."""
        self._ready = ready
        self._timeout_s = timeout_s
        self._max = max_waiting
        self._clock = clock
        self._sleep = sleep
        self.wakeable: frozenset[str] = frozenset()
        self._wakes: dict[str, _Wake] = {}
        # Called when a model's first waiter arrives (cortex reports at once).
        self.on_wake: Callable[[], None] = lambda: None

    def sleeping(self, model: str) -> bool:
        """A wakeable model with no ready replica now."""
        return model in self.wakeable and not self._ready(model)

    def waiting(self) -> dict[str, int]:
        """Requests waiting per model for its wake."""
        return {m: w.waiters for m, w in self._wakes.items() if w.waiters}

    def waking(self, model: str) -> bool:
        return model in self._wakes

    async def wait(self, model: str, label: str) -> None:
        """Return at once unless `model` sleeps; else wait until a replica
        of it is ready (recording the wait in the request's ColdStart), or
        raise after its wake timeout."""
        if not self.sleeping(model):
            return
        wake = self._wakes.get(model)
        if wake is None:
            wake = self._wakes[model] = _Wake(self._clock())
            metrics.record_wake(label)
            self.on_wake()
        if wake.waiters >= self._max:
            raise ModelOverloadedError(
                f"The model '{model}' is starting and {wake.waiters} requests already wait "
                "for it. Retry shortly.",
                retry_after=RETRY_AFTER_S,
            )
        arrived = self._clock()
        timeout = self._timeout_s(model)
        wake.waiters += 1
        try:
            ready = await set_within(wake.ready, self._sleep(timeout))
        finally:
            wake.waiters -= 1
        if not ready:
            raise UnavailableError(
                f"The model '{model}' is starting (it was scaled to zero and this request "
                f"woke it); no replica was ready within {timeout:g} s. Retry shortly.",
                retry_after=RETRY_AFTER_S,
            )
        holder = cold_start.get()
        if holder is not None:
            holder.ms = round((self._clock() - arrived) * 1000)

    def refreshed(self) -> None:
        """Release the waiters of every model that has a ready replica now
        (call after each poll of the replicas)."""
        for model, wake in list(self._wakes.items()):
            if self._ready(model):
                metrics.record_wake_duration(model, self._clock() - wake.started)
                wake.ready.set()
                del self._wakes[model]
            elif not wake.waiters:
                # Every waiter gave up (timed out, cancelled): the next
                # request starts a new wake, counted again.
                del self._wakes[model]
