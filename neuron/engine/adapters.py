"""An engine's LoRA adapters: the ones it may serve (its catalogue, from the
neuron's settings and LoadAdapter calls) and the bounded set it holds on the
engine (residency.py), loaded on demand.

A request for an adapter that is not held loads it, evicting the least
recently used adapter with nothing in flight; concurrent requests for it
wait for that one load. When every adapter held has requests in flight the
request waits until one is released: an eviction never breaks a request.
How a load or an eviction is done is the engine's (`AdapterBackend`: vLLM's
add_lora / remove_lora, or the sim's timed pretence).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Protocol

from axon.adapters import AdapterSource
from axon.errors import ModelNotFoundError
from neuron import metrics
from neuron.engine.base import ServedModel, no_adapters
from neuron.engine.residency import Residency

log = logging.getLogger("neuraxis.neuron")


@dataclass(frozen=True)
class Adapter:
    """An adapter of the catalogue, with the engine's number for it (vLLM's
    lora_int_id: positive, never reused for another adapter)."""

    id: str
    source: str
    number: int


class AdapterBackend(Protocol):
    async def attach(self, adapter: Adapter) -> None:
        """Load `adapter` onto the engine."""

    async def detach(self, adapter: Adapter) -> None:
        """Take `adapter` off the engine (no request of its is in flight)."""


class Adapters:
    def __init__(
        self, backend: AdapterBackend, capacity: int, catalogue: tuple[AdapterSource, ...] = ()
    ) -> None:
        self._backend = backend
        self._residency = Residency(capacity)
        self._catalogue: dict[str, Adapter] = {}
        self._numbers = 0
        self._loads: dict[str, asyncio.Task[None]] = {}
        # One load at a time: making room and taking it are one step (two
        # loads making room at once took the same free slot).
        self._loading = asyncio.Lock()
        self._released = asyncio.Condition()
        # Requests waiting for an adapter to be held (using): spared by
        # evictions, as those in flight are.
        self._waiting: Counter[str] = Counter()
        for source in catalogue:
            self.offer(source)

    def offer(self, source: AdapterSource) -> Adapter:
        """Add `source` to the catalogue (or change where an id loads from,
        for its next load)."""
        known = self._catalogue.get(source.id)
        if known is not None and known.source == source.source:
            return known
        self._numbers += 1
        adapter = Adapter(source.id, source.source, self._numbers)
        self._catalogue[source.id] = adapter
        return adapter

    @property
    def capacity(self) -> int:
        return self._residency.capacity

    def catalogue(self) -> list[Adapter]:
        return list(self._catalogue.values())

    def held(self) -> list[str]:
        """The adapters on the engine now, least recently used first."""
        return self._residency.held()

    def known(self, adapter_id: str) -> bool:
        return adapter_id in self._catalogue

    def models(self, base: ServedModel) -> list[ServedModel]:
        """Each adapter of the catalogue as a model of `base`'s."""
        return [replace(base, id=a, parent=base.id) for a in self._catalogue]

    @contextlib.asynccontextmanager
    async def using(self, adapter_id: str) -> AsyncIterator[Adapter]:
        """Hold `adapter_id` on the engine for one request (loading it if it
        is not held), released when the request ends."""
        self._current(adapter_id)
        # Counted while it waits, so that no other load evicts the adapter
        # between its load and this request's start: the next load takes the
        # loading lock before the waiters of the last one run again (on vLLM,
        # two adapters asked for at once on one slot were loaded 8 times each).
        self._waiting[adapter_id] += 1
        try:
            adapter = await self.ensure(adapter_id)
        except BaseException:
            self._stop_waiting(adapter_id)
            # A load may be waiting for this adapter to be spared no more.
            async with self._released:
                self._released.notify_all()
            raise
        # No await from here to the acquire: nothing evicts it meanwhile.
        self._stop_waiting(adapter.id)
        self._residency.acquire(adapter.id)
        try:
            yield adapter
        finally:
            self._residency.release(adapter.id)
            async with self._released:
                self._released.notify_all()

    def _stop_waiting(self, adapter_id: str) -> None:
        self._waiting[adapter_id] -= 1
        if self._waiting[adapter_id] <= 0:
            del self._waiting[adapter_id]

    def _current(self, adapter_id: str) -> Adapter:
        adapter = self._catalogue.get(adapter_id)
        if adapter is None:
            raise ModelNotFoundError(f"The model '{adapter_id}' does not exist on this neuron.")
        return adapter

    async def ensure(self, adapter_id: str) -> Adapter:
        """The catalogue's `adapter_id`, held on the engine: loaded now, or by
        the load already under way for it. Looked up again after each wait:
        a request still waiting when the adapter is removed is refused
        rather than loading it back."""
        while True:
            adapter = self._current(adapter_id)
            if self._residency.holds(adapter.id):
                return adapter
            task = self._loads.get(adapter.id)
            if task is None:
                task = asyncio.create_task(self._load(adapter))
                self._loads[adapter.id] = task
                task.add_done_callback(lambda _: self._loads.pop(adapter_id, None))
            # Shielded: a request that gives up does not cancel the load the
            # others wait for.
            await asyncio.shield(task)

    async def _load(self, adapter: Adapter) -> None:
        async with self._loading:
            if not await self._make_room(adapter):
                return  # removed (or its source changed) while this load waited
            await self._backend.attach(adapter)
            self._residency.admit(adapter.id)
        metrics.record_adapter_load(adapter.id)
        log.info("adapter %s loaded from %s", adapter.id, adapter.source)

    async def _make_room(self, adapter: Adapter) -> bool:
        """Room for `adapter` on the engine; False, with nothing evicted,
        once it is no longer the catalogue's (remove wakes the wait)."""
        while self._catalogue.get(adapter.id) is adapter:
            if not self._residency.full():
                return True
            victim = self._residency.victim(spared=self._waiting)
            if victim is None:
                # Every adapter held is in use: wait for a request to end.
                async with self._released:
                    await self._released.wait()
                continue
            await self._evict(victim)
        return False

    async def _evict(self, adapter_id: str) -> None:
        # Out of the set first: a request arriving meanwhile loads it again
        # rather than using what is being removed.
        self._residency.evict(adapter_id)
        await self._backend.detach(self._catalogue[adapter_id])
        metrics.record_adapter_eviction(adapter_id)
        log.info("adapter %s evicted", adapter_id)

    async def add(self, source: AdapterSource) -> None:
        """LoadAdapter: into the catalogue and onto the engine."""
        await self.ensure(self.offer(source).id)

    async def remove(self, adapter_id: str) -> None:
        """UnloadAdapter: off the engine once its requests have ended, and
        out of the catalogue."""
        adapter = self._catalogue.pop(adapter_id, None)
        if adapter is None:
            raise ModelNotFoundError(f"The model '{adapter_id}' does not exist on this neuron.")
        async with self._released:
            self._released.notify_all()  # a load of it waiting for room gives up
        load = self._loads.get(adapter_id)
        if load is not None:
            await asyncio.shield(load)
        async with self._released:
            await self._released.wait_for(lambda: self._residency.in_flight(adapter_id) == 0)
        if self._residency.holds(adapter_id):
            self._residency.evict(adapter_id)
            await self._backend.detach(adapter)
            metrics.record_adapter_eviction(adapter_id)


class ServesAdapters:
    """The engine interface's adapter methods over an engine's `Adapters`
    (None: no LoRA), for engines to inherit before `Engine`."""

    _adapters: Adapters | None = None

    def held_adapters(self) -> list[str]:
        return self._adapters.held() if self._adapters is not None else []

    def max_adapters(self) -> int:
        return self._adapters.capacity if self._adapters is not None else 0

    async def load_adapter(self, source: AdapterSource) -> None:
        if self._adapters is None:
            raise no_adapters()
        await self._adapters.add(source)

    async def unload_adapter(self, adapter_id: str) -> None:
        if self._adapters is None:
            raise no_adapters()
        await self._adapters.remove(adapter_id)
