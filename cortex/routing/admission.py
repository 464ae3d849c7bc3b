"""Admission control: how many requests a model's replicas take at once,
and the bounded queue the rest wait in.

Each replica has a concurrency cap (`replica_max_concurrency`, by default
the batch size its engine reports in Info: vLLM's max_num_seqs). While a
model's ready replicas have a free slot between them, its requests go
straight to the pool; beyond that they wait in the model's FIFO queue, and
each freed slot (a request ending, a replica becoming ready) goes to the
oldest waiter. A request that finds the queue full, or waits past
`queue_timeout_s`, fails at once with `ModelOverloadedError` (503 +
Retry-After, code `model_overloaded`) instead of piling up in the engines'
own queues until a deadline answers 504. A waiter that is cancelled (its
client left) leaves the queue at once.

Newcomers never overtake waiters: a request that finds anyone queued queues
behind them. A slot handed to a waiter is counted as taken (`_granted`)
until the waiter resumes and the pool dispatches it, so that two wake-ups
cannot hand out one slot twice.

What is free is the pool's to say (`FreeSlots`: it knows the replicas, their
caps and their outstanding requests); when no cap applies (admission off, a
replica without one, or no ready replica, which the pool answers itself)
it says None and nothing waits here. Time comes from a clock and a sleep
passed in, so the tests drive the queue by hand. The per-replica choice
among the replicas with a free slot stays the routing policy's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import Field, NonNegativeInt, PositiveFloat

from axon.errors import ModelOverloadedError
from axon.settings import SettingsGroup
from cortex import metrics

# The model's free slots over its ready replicas, or None: no cap applies.
FreeSlots = Callable[[str], "int | None"]
Sleep = Callable[[float], Awaitable[None]]

# A refused client is told to retry after this: a slot frees when some
# request ends, which cannot be known in advance.
RETRY_AFTER_S = 1


class AdmissionOptions(SettingsGroup):
    """Replica caps and the per-model queue
    (docs/deploy.md, "Admission control")."""

    replica_max_concurrency: int = Field(
        0,
        ge=-1,
        description="requests one replica takes at once; more wait in the model's admission "
        "queue. 0: the batch size its engine reports (vLLM's max_num_seqs; no cap if it "
        "reports none); -1: no caps, no queue",
    )
    queue_size: NonNegativeInt = Field(
        256,
        description="requests per model that may wait for a replica slot; past it a request "
        "gets 503 model_overloaded at once",
    )
    queue_timeout_s: PositiveFloat = Field(
        30.0,
        description="how long a request may wait for a replica slot before it gets 503 "
        "model_overloaded (s)",
    )

    @property
    def enabled(self) -> bool:
        return self.replica_max_concurrency >= 0

    def cap(self, reported: int) -> int | None:
        """A replica's cap, given what its neuron reported (0: nothing)."""
        if self.replica_max_concurrency > 0:
            return self.replica_max_concurrency
        if self.replica_max_concurrency == 0 and reported > 0:
            return reported
        return None


@dataclass(eq=False)
class _Waiter:
    granted: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class AdmissionControl:
    def __init__(
        self,
        options: AdmissionOptions,
        free_slots: FreeSlots,
        clock: Callable[[], float],
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._options = options
        self._free = free_slots
        self._clock = clock
        self._sleep = sleep
        self._queues: dict[str, deque[_Waiter]] = {}
        # Slots handed to woken waiters that the pool has not dispatched yet.
        self._granted: dict[str, int] = {}
        self._labels: dict[str, str] = {}

    def depth(self, model: str) -> int:
        """Requests waiting for `model` now."""
        return len(self._queues.get(model, ()))

    async def admit(self, model: str, label: str) -> None:
        """Return when `model`'s request may be dispatched (the caller then
        dispatches it before its next await), or raise ModelOverloadedError.
        `label` is the model as a metrics label."""
        if not self._options.enabled:
            return
        queue = self._queues.get(model)
        if not queue and self._has_slot(model):
            metrics.record_admission_wait(label, 0.0)
            return
        if queue is None:
            queue = self._queues[model] = deque()
        if len(queue) >= self._options.queue_size:
            raise _refused(
                model,
                label,
                "queue_full",
                f"its replicas are busy and {len(queue)} requests are already waiting",
            )
        await self._wait(model, label, queue)

    async def _wait(self, model: str, label: str, queue: deque[_Waiter]) -> None:
        waiter = _Waiter()
        queue.append(waiter)
        self._labels[model] = label
        metrics.set_admission_queue_depth(label, len(queue))
        started = self._clock()
        timer = asyncio.ensure_future(self._sleep(self._options.queue_timeout_s))
        try:
            await asyncio.wait({waiter.granted, timer}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            # Cancelled (the client left): out of the queue at once, and a
            # slot already handed over goes to the next waiter.
            self._leave(model, waiter)
            raise
        finally:
            timer.cancel()
            metrics.record_admission_wait(label, self._clock() - started)
        if waiter.granted.done():
            self._granted[model] -= 1  # dispatched by the caller right away
            return
        self._leave(model, waiter)
        raise _refused(
            model,
            label,
            "timeout",
            f"no replica took the request within {self._options.queue_timeout_s:g} s",
        )

    def _leave(self, model: str, waiter: _Waiter) -> None:
        queue = self._queues.get(model)
        if queue is not None:
            with contextlib.suppress(ValueError):  # already popped by a wake-up
                queue.remove(waiter)
            metrics.set_admission_queue_depth(self._labels.get(model, model), len(queue))
        if waiter.granted.done() and not waiter.granted.cancelled():
            self._granted[model] -= 1
            self.wake(model)
        else:
            waiter.granted.cancel()

    def _has_slot(self, model: str) -> bool:
        free = self._free(model)
        return free is None or free > self._granted.get(model, 0)

    def wake(self, model: str | None = None) -> None:
        """Hand the free slots of `model` (of every model with waiters if
        None) to its oldest waiters: call whenever a slot may have freed."""
        models = [model] if model is not None else list(self._queues)
        for name in models:
            queue = self._queues.get(name)
            if not queue:
                continue
            while queue and self._has_slot(name):
                waiter = queue.popleft()
                waiter.granted.set_result(None)
                self._granted[name] = self._granted.get(name, 0) + 1
            metrics.set_admission_queue_depth(self._labels.get(name, name), len(queue))


def _refused(model: str, label: str, reason: str, why: str) -> ModelOverloadedError:
    """A request admission turns away, counted by `reason`."""
    metrics.record_admission_rejected(label, reason)
    return ModelOverloadedError(
        f"The model '{model}' is overloaded: {why}. Retry shortly.", retry_after=RETRY_AFTER_S
    )
