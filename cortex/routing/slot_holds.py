"""Slots kept a moment for the tenant whose request just freed them.

A client that sends one request after another (a chat turn, an agent's
next step) is idle between two of them for the time its answer takes to
reach it and its next request to come back: a few milliseconds. Work-
conserving fair queuing hands the slot it freed to a backlogged tenant's
waiter in that moment, and the client's next request, though owed the next
slot, waits for another to free: up to a whole request's time when a
backlog's requests end together. This is the deceptive idleness of disk
schedulers (Iyer and Druschel, 2001; Linux CFQ's slice_idle), and the cure
is theirs: when a request ends, its tenant has nothing waiting, others
wait, and the fair order would take that tenant's next request first, the
slot is held for it for `slot_hold_ms`. Its next request within that time
takes the slot at once; past it the slot goes to the next waiter. A hold
costs at most that idle time, and only while the model is saturated.

`SlotHolds` keeps the holds per model (`admission.py` decides when to
hold): how many slots they keep from other tenants, and each one's timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cortex import metrics

Sleep = Callable[[float], Awaitable[None]]


@dataclass
class _Hold:
    rank: int  # the class of the request that ended (its tenant's next takes it at that or higher)
    timer: asyncio.Task[None]


class SlotHolds:
    def __init__(self, sleep: Sleep, expired: Callable[[str], None]) -> None:
        """`sleep`: the clock's; `expired(model)`: told when a hold lapses
        (its slot is free for the waiters)."""
        self._sleep = sleep
        self._expired = expired
        self._held: dict[str, dict[str, _Hold]] = {}

    def count(self, model: str) -> int:
        """Slots of `model` kept from everyone but their tenants."""
        return len(self._held.get(model, ()))

    def holds(self, model: str, tenant: str) -> bool:
        return tenant in self._held.get(model, {})

    def hold(self, model: str, label: str, tenant: str, rank: int, seconds: float) -> None:
        """Keep a slot of `model` for `tenant` for `seconds`."""
        timer = asyncio.ensure_future(self._lapse(model, label, tenant, seconds))
        self._held.setdefault(model, {})[tenant] = _Hold(rank, timer)

    def take(self, model: str, label: str, tenant: str, rank: int) -> bool:
        """Whether a request of `tenant` and class `rank` takes a slot held
        for it (the hold ends either way: a request of a lower class than
        the one that ended is not owed it)."""
        held = self._end(model, tenant)
        if held is None:
            return False
        held.timer.cancel()
        taken = rank <= held.rank
        metrics.record_slot_hold(label, "taken" if taken else "lower_class")
        if not taken:
            self._expired(model)
        return taken

    async def _lapse(self, model: str, label: str, tenant: str, seconds: float) -> None:
        await self._sleep(seconds)
        if self._end(model, tenant) is not None:
            metrics.record_slot_hold(label, "expired")
            self._expired(model)

    def _end(self, model: str, tenant: str) -> _Hold | None:
        held = self._held.get(model, {})
        hold = held.pop(tenant, None)
        if not held:
            self._held.pop(model, None)
        return hold
