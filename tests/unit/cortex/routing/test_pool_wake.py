"""A model scaled to zero, through NeuronPool with in-memory neurons and a
hand-moved clock: its requests wait for a wake (reported at once), are
served when a replica joins the table, carry their wait as the cold start,
and time out with a 503 that says the model is starting."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from axon.errors import ModelNotFoundError, ModelOverloadedError, UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.routing.admission import AdmissionOptions
from cortex.routing.pool import NeuronPool
from cortex.routing.wake import ColdStart, cold_start
from harness.clock import ManualClock, until
from tests.unit.cortex.routing.fakes import Fleet
from tests.unit.cortex.routing.pools import fake_pool, request, texts


def _asleep(time: ManualClock, fleet: Fleet, size: int = 8) -> tuple[NeuronPool, list[int]]:
    pool = fake_pool(
        [],
        clock=time,
        fleet=fleet,
        expected=("m",),
        poll_interval_s=60,
        admission=AdmissionOptions(queue_size=size),
        sleep=time.sleep,
    )
    pool.wakes.wakeable = frozenset({"m"})
    pool.wake_timeouts["m"] = 120.0
    pokes: list[int] = []
    pool.wakes.on_wake = lambda: pokes.append(1)
    return pool, pokes


async def test_a_request_wakes_the_model_waits_and_is_served_with_its_cold_start() -> None:
    time, fleet = ManualClock(), Fleet()
    pool, pokes = _asleep(time, fleet)
    assert pool.missing_models() == []  # /readyz: a sleeping model serves after a wake
    assert pool.sleeping_models() == {"m": False}
    holder = ColdStart()
    cold_start.set(holder)
    served = asyncio.ensure_future(texts(pool.generate(request())))
    await until(lambda: pool.waiting() == {"m": 1})
    assert pokes == [1]  # cortex reports at once
    assert pool.sleeping_models() == {"m": True}
    await time.elapse(42.0)
    await pool.update(["replica-1:1"])  # the controller's table gains the replica
    await pool.refresh()
    assert await served == ["hi", "!"]
    assert holder.ms == 42_000
    assert pool.sleeping_models() == {}
    # Served directly from now on: no wait, no cold start.
    later = ColdStart()
    cold_start.set(later)
    assert await texts(pool.generate(request(request_id="req-2"))) == ["hi", "!"]
    assert later.ms is None


async def test_a_wake_that_takes_too_long_is_a_503_that_says_the_model_is_starting() -> None:
    time, fleet = ManualClock(), Fleet()
    pool, _ = _asleep(time, fleet)
    served = asyncio.ensure_future(texts(pool.generate(request())))
    await until(lambda: time.sleeping == 1)
    await time.elapse(120.0)
    with pytest.raises(UnavailableError, match="'m' is starting") as refused:
        await served
    assert refused.value.retry_after > 0
    assert pool.waiting() == {}


async def test_the_wait_for_a_wake_is_bounded() -> None:
    time, fleet = ManualClock(), Fleet()
    pool, _ = _asleep(time, fleet, size=2)
    waiting = [asyncio.ensure_future(texts(pool.generate(request()))) for _ in range(2)]
    await until(lambda: pool.waiting() == {"m": 2})
    with pytest.raises(ModelOverloadedError, match="is starting"):
        await texts(pool.generate(request()))
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    assert pool.waiting() == {}


async def test_a_model_that_is_not_wakeable_is_not_held() -> None:
    time, fleet = ManualClock(), Fleet()
    pool, pokes = _asleep(time, fleet)
    pool.wakes.wakeable = frozenset()
    with pytest.raises(UnavailableError, match="No neuron serving 'm' is ready"):
        await texts(pool.generate(request()))
    assert pokes == []


async def test_the_pool_reports_caps_kv_usage_and_waiting_per_model() -> None:
    time, fleet = ManualClock(), Fleet()
    pool, _ = _asleep(time, fleet)
    await pool.update(["r1:1", "r2:1"])
    fleet.neurons["r1:1"].max_concurrency, fleet.neurons["r2:1"].max_concurrency = 8, 16
    fleet.neurons["r1:1"].kv_cache_usage = 0.25
    fleet.neurons["r2:1"].kv_cache_usage = 0.75
    await pool.refresh()
    await pool.refresh_load()
    assert pool.caps() == {"m": 16}
    assert pool.kv_usage() == {"m": 0.75}
    assert pool.waiting() == {}


async def test_a_request_for_an_adapter_wakes_its_base_and_waits_as_its_base() -> None:
    time, fleet = ManualClock(), Fleet()
    pool, pokes = _asleep(time, fleet)
    pool.set_adapters({"a": "m"})
    served = asyncio.ensure_future(texts(pool.generate(request("a"))))
    await until(lambda: pool.waiting() == {"m": 1})
    assert pokes == [1]
    replica = fleet("replica-1:1")
    replica.models.append(pb.ModelInfo(id="a", parent="m", max_context_length=100))
    await pool.update(["replica-1:1"])
    assert await served == ["hi", "!"]
    assert replica.generate_requests[0].model == "a"


async def test_an_adapter_the_controller_no_longer_serves_is_not_found_not_woken() -> None:
    time, fleet = ManualClock(), Fleet()
    pool, pokes = _asleep(time, fleet)
    # The spec file's adapter at start; the controller's table then says it
    # was removed at run time, and one was added.
    pool.set_adapters({"spec-a": "m"})
    pool.set_adapters({"added": "m"})
    with pytest.raises(ModelNotFoundError, match="'spec-a' does not exist"):
        await texts(pool.generate(request("spec-a")))
    assert pokes == [] and pool.waiting() == {}
    assert pool.model_label("spec-a") == "unknown" and pool.model_label("added") == "added"
    waking = asyncio.ensure_future(texts(pool.generate(request("added"))))
    await until(lambda: pool.waiting() == {"m": 1})
    assert pokes == [1]
    waking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waking
