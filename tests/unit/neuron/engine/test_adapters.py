"""An engine's adapters loaded on demand: one load for concurrent first
requests, the least recently used idle one evicted, none in use."""

from __future__ import annotations

import asyncio

import pytest

from axon.adapters import AdapterSource
from axon.errors import ModelNotFoundError
from neuron.engine.adapters import Adapter, Adapters


class Backend:
    """Records loads and unloads; a load waits until `gate` is set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.events: list[str] = []

    async def attach(self, adapter: Adapter) -> None:
        await self.gate.wait()
        self.events.append(f"load {adapter.id}")

    async def detach(self, adapter: Adapter) -> None:
        self.events.append(f"unload {adapter.id}")


def _adapters(backend: Backend, capacity: int, *ids: str) -> Adapters:
    return Adapters(backend, capacity, tuple(AdapterSource(i, f"/a/{i}") for i in ids))


async def _use(adapters: Adapters, adapter_id: str) -> None:
    async with adapters.using(adapter_id):
        pass


async def test_concurrent_first_requests_wait_for_one_load() -> None:
    backend = Backend()
    backend.gate.clear()
    adapters = _adapters(backend, 2, "a")
    uses = [asyncio.create_task(_use(adapters, "a")) for _ in range(5)]
    await asyncio.sleep(0)
    assert adapters.held() == []
    backend.gate.set()
    await asyncio.gather(*uses)
    assert backend.events == ["load a"]
    assert adapters.held() == ["a"]


async def test_the_least_recently_used_idle_adapter_makes_room() -> None:
    backend = Backend()
    adapters = _adapters(backend, 2, "a", "b", "c")
    await _use(adapters, "a")
    await _use(adapters, "b")
    await _use(adapters, "a")
    await _use(adapters, "c")
    assert backend.events == ["load a", "load b", "unload b", "load c"]
    assert adapters.held() == ["a", "c"]


async def test_a_load_waits_while_every_adapter_held_is_in_use() -> None:
    backend = Backend()
    adapters = _adapters(backend, 1, "a", "b")
    async with adapters.using("a"):
        waiting = asyncio.create_task(_use(adapters, "b"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done() and backend.events == ["load a"]  # a's request runs on
    await waiting
    assert backend.events == ["load a", "unload a", "load b"]


async def test_an_adapter_outside_the_catalogue_is_not_found() -> None:
    adapters = _adapters(Backend(), 1, "a")
    with pytest.raises(ModelNotFoundError, match="'z'"):
        await _use(adapters, "z")


async def test_added_then_removed() -> None:
    backend = Backend()
    adapters = _adapters(backend, 2)
    await adapters.add(AdapterSource("n", "/a/n"))
    assert adapters.held() == ["n"] and adapters.known("n")
    await adapters.remove("n")
    assert not adapters.known("n") and adapters.held() == []
    assert backend.events == ["load n", "unload n"]


async def test_removal_waits_for_the_requests_in_flight() -> None:
    backend = Backend()
    adapters = _adapters(backend, 1, "a")
    async with adapters.using("a"):
        removal = asyncio.create_task(adapters.remove("a"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not removal.done()
    await removal
    assert backend.events == ["load a", "unload a"]


async def test_a_loaded_adapter_is_not_evicted_before_its_waiting_requests_start() -> None:
    """Requests for two adapters at once on an engine that holds one: each
    adapter is loaded once, and its requests run on it before the other's
    load may evict it (on real vLLM the next load took the lock first and
    evicted an adapter its waiters had not yet started on: 8 loads each)."""
    backend = Backend()
    adapters = _adapters(backend, 1, "a", "b", "c")
    async with adapters.using("a"):
        uses = [asyncio.create_task(_use(adapters, i)) for i in ("b", "c", "b", "c")]
        for _ in range(5):
            await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*uses), timeout=5)
    loads = [e for e in backend.events if e.startswith("load")]
    assert sorted(loads) == ["load a", "load b", "load c"], backend.events


async def test_a_request_waiting_when_its_adapter_is_removed_does_not_load_it_back() -> None:
    """A request for `b` waits for room (the one slot busy with `a`); `b`
    is removed meanwhile: the request is refused, `b` never loads."""
    backend = Backend()
    adapters = _adapters(backend, 1, "a", "b")
    async with adapters.using("a"):
        waiting = asyncio.create_task(_use(adapters, "b"))
        for _ in range(5):
            await asyncio.sleep(0)
        # Within the using block: the removal must not wait for `a`'s room.
        await asyncio.wait_for(adapters.remove("b"), timeout=5)
    with pytest.raises(ModelNotFoundError, match="'b'"):
        await waiting
    assert backend.events == ["load a"]
    assert adapters.held() == ["a"]
