"""NeuronPool's membership with in-memory neurons: the endpoint table adds
neurons, retired ones finish their requests before they are closed, the
background poll brings ready ones in, stop closes them all."""

from __future__ import annotations

import asyncio

import pytest

from axon.errors import (
    UnavailableError,
)
from tests.unit.cortex.routing import pools
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, Fleet, text


async def test_the_endpoint_table_adds_neurons_through_the_client_factory() -> None:
    fleet = Fleet()
    pool = await pools.polled(pools.fake_pool([], fleet=fleet))
    with pytest.raises(UnavailableError):
        await pools.texts(pool.generate(pools.request()))
    await pool.update(["table-a:1"])
    assert await pools.texts(pool.generate(pools.request())) == ["hi", "!"]
    assert len(fleet.neurons["table-a:1"].generate_requests) == 1
    assert [address for address, _ in pool.neurons()] == ["table-a:1"]


async def test_a_retired_neuron_finishes_its_requests_and_is_closed_after_the_last() -> None:
    fleet = Fleet()
    old, new = fleet("retire-old:1"), fleet("retire-new:1")
    holds = [asyncio.Event(), asyncio.Event()]
    old.script = [text("old"), holds[0], holds[1], DONE]
    pool = await pools.polled(pools.fake_pool([old], fleet=fleet))
    first, second = pool.generate(pools.request()), pool.generate(pools.request())
    await pools.first_message(first)
    await pools.first_message(second)
    await pool.update(["retire-new:1"])
    assert not old.closed
    assert await pools.texts(pool.generate(pools.request())) == ["hi", "!"]  # no new work on old
    assert len(old.generate_requests) == 2
    assert len(new.generate_requests) == 1
    holds[0].set()
    holds[1].set()
    assert await pools.texts(first) == ["!"]
    assert not old.closed  # the second request is still in flight
    assert await pools.texts(second) == ["!"]
    assert old.closed
    assert not new.closed


async def test_an_idle_retired_neuron_is_closed_at_once() -> None:
    fleet = Fleet()
    idle = fleet("retire-idle:1")
    pool = await pools.polled(pools.fake_pool([idle], fleet=fleet))
    await pool.update([])
    assert idle.closed
    assert pool.neurons() == []


async def test_the_background_poll_brings_a_neuron_in_once_it_is_ready() -> None:
    loading = FakeNeuron("poll-a:1", ready=False)
    pool = pools.fake_pool([loading])
    await pool.start()
    try:
        assert pool.missing_models() == ["m"]
        loading.ready = True
        deadline = asyncio.get_running_loop().time() + 5.0
        while pool.missing_models() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert pool.missing_models() == []
        assert await pools.texts(pool.generate(pools.request())) == ["hi", "!"]
    finally:
        await pool.stop()


async def test_stop_closes_every_neuron() -> None:
    a, b = FakeNeuron("stop-a:1"), FakeNeuron("stop-b:1")
    pool = pools.fake_pool([a, b])
    await pool.start()
    await pool.stop()
    assert a.closed and b.closed
