"""NeuronPool's admission hook with in-memory neurons: per-replica caps
(the setting, or what the neuron reports), requests beyond them queued
until a slot frees, the policy shown only replicas below their caps, and
the queue timing out and filling up."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from axon.errors import ModelOverloadedError
from axon.v1 import neuron_pb2 as pb
from cortex.routing.admission import AdmissionOptions
from cortex.routing.admission_wait import AdmissionWait
from cortex.routing.policy import Candidate, Outcome, RouteHints, RouteRequest, RoutingPolicy
from cortex.routing.pool import NeuronPool
from harness.clock import ManualClock, until
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, text
from tests.unit.cortex.routing.pools import InOrder, fake_pool, texts


class FirstCandidate(RoutingPolicy):
    """Takes the first candidate and records the addresses it was shown."""

    def __init__(self) -> None:
        self.shown: list[list[str]] = []

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        self.shown.append([c.address for c in candidates])
        return candidates[0]


def _pool(
    neurons: Sequence[FakeNeuron],
    time: ManualClock,
    *,
    cap: int = 1,
    size: int = 8,
    timeout_s: float = 5.0,
    policy: RoutingPolicy | None = None,
) -> NeuronPool:
    return fake_pool(
        neurons,
        policy=policy,
        clock=time,
        timeout_s=60,
        poll_interval_s=60,
        admission=AdmissionOptions(
            replica_max_concurrency=cap, queue_size=size, queue_timeout_s=timeout_s
        ),
        sleep=time.sleep,
    )


def _held(neuron: FakeNeuron) -> asyncio.Event:
    hold = asyncio.Event()
    neuron.script = [text("first"), hold, DONE]
    return hold


def _request(i: int = 0) -> pb.GenerateRequest:
    return pb.GenerateRequest(request_id=f"req-{i}", model="m")


async def test_requests_beyond_the_caps_wait_and_proceed_when_a_slot_frees() -> None:
    a, b = FakeNeuron("adm-pool-a:1"), FakeNeuron("adm-pool-b:1")
    holds = {a.address: _held(a), b.address: _held(b)}
    time = ManualClock()
    pool = _pool([a, b], time, cap=1)
    await pool.refresh()
    first, second = pool.generate(_request(1)), pool.generate(_request(2))
    await anext(first)
    await anext(second)
    assert (a.streams_open, b.streams_open) == (1, 1)  # one each: both at their caps
    third = asyncio.ensure_future(anext(pool.generate(_request(3))))
    await until(lambda: pool.queued("m") == 1)
    assert len(a.generate_requests) + len(b.generate_requests) == 2  # not dispatched
    holds[b.address].set()  # b's request ends: its slot frees
    assert await texts(second) == ["!"]
    await third
    assert pool.queued("m") == 0
    assert [r.request_id for r in b.generate_requests] == ["req-2", "req-3"]
    holds[a.address].set()
    await texts(first)


async def test_the_route_hints_carry_the_time_queued_to_the_caller() -> None:
    neuron = FakeNeuron("adm-pool-waited:1")
    hold = _held(neuron)
    time = ManualClock()
    pool = _pool([neuron], time, cap=1)
    await pool.refresh()
    running, queued = AdmissionWait(), AdmissionWait()
    first = pool.generate(_request(1), RouteHints(waited=running))
    await anext(first)
    second = asyncio.ensure_future(anext(pool.generate(_request(2), RouteHints(waited=queued))))
    await until(lambda: pool.queued("m") == 1)
    time.advance(1.5)
    hold.set()
    await texts(first)
    await second
    assert (running.seconds, queued.seconds) == (0.0, 1.5)


async def test_a_reader_that_stops_at_the_usage_frees_the_slot_and_counts_a_success() -> None:
    # The API's readers stop at the message with the usage and never ask
    # for the stream's end (chat.py's chunks, choices.collect): the slot
    # must free then, not when the generator is collected.
    neuron = FakeNeuron("adm-pool-usage:1")
    policy = InOrder()
    pool = _pool([neuron], ManualClock(), cap=1, policy=policy)
    await pool.refresh()
    first = pool.generate(_request(1))
    while not (await anext(first)).HasField("usage"):
        pass
    # `first` is still referenced and open; the next request gets its slot.
    second = pool.generate(_request(2))
    assert await asyncio.wait_for(texts(second), 5) == ["hi", "!"]  # not queued behind it
    assert pool.queued("m") == 0
    assert [outcome for _, _, outcome in policy.completed] == [Outcome.OK, Outcome.OK]
    assert await texts(first) == []  # its end, read later, counts nothing twice
    assert len(policy.completed) == 2


async def test_the_cap_defaults_to_what_the_neuron_reports() -> None:
    neuron = FakeNeuron("adm-pool-reported:1")
    neuron.max_concurrency = 2
    hold = _held(neuron)
    time = ManualClock()
    pool = _pool([neuron], time, cap=0)
    await pool.refresh()
    streams = [pool.generate(_request(i)) for i in range(2)]
    for stream in streams:
        await anext(stream)
    waiting = asyncio.ensure_future(anext(pool.generate(_request(2))))
    await until(lambda: pool.queued("m") == 1)
    assert neuron.streams_open == 2
    hold.set()
    for stream in streams:
        await texts(stream)
    await waiting


async def test_without_a_reported_batch_size_nothing_is_capped() -> None:
    neuron = FakeNeuron("adm-pool-uncapped:1")  # reports max_concurrency 0
    hold = _held(neuron)
    pool = _pool([neuron], ManualClock(), cap=0, size=0)
    await pool.refresh()
    streams = [pool.generate(_request(i)) for i in range(5)]
    for stream in streams:
        await anext(stream)
    assert neuron.streams_open == 5
    hold.set()
    for stream in streams:
        await texts(stream)


async def test_the_policy_sees_only_replicas_below_their_caps() -> None:
    a, b = FakeNeuron("adm-pool-full:1"), FakeNeuron("adm-pool-free:1")
    hold_a, hold_b = _held(a), _held(b)
    policy = FirstCandidate()
    pool = _pool([a, b], ManualClock(), cap=1, policy=policy)
    await pool.refresh()
    first, second = pool.generate(_request(1)), pool.generate(_request(2))
    await anext(first)  # to a: the first candidate
    await anext(second)  # a is at its cap: b is the only candidate
    assert policy.shown == [[a.address, b.address], [b.address]]
    assert (a.streams_open, b.streams_open) == (1, 1)
    hold_a.set()
    hold_b.set()
    await texts(first)
    await texts(second)


async def test_a_full_queue_and_a_timed_out_wait_are_503_model_overloaded() -> None:
    neuron = FakeNeuron("adm-pool-overload:1")
    hold = _held(neuron)
    time = ManualClock()
    pool = _pool([neuron], time, cap=1, size=1, timeout_s=5.0)
    await pool.refresh()
    busy = pool.generate(_request(0))
    await anext(busy)
    queued = asyncio.ensure_future(anext(pool.generate(_request(1))))
    await until(lambda: pool.queued("m") == 1)
    with pytest.raises(ModelOverloadedError, match="already waiting"):
        await anext(pool.generate(_request(2)))
    await until(lambda: time.sleeping >= 1)
    time.advance(5.0)
    with pytest.raises(ModelOverloadedError, match="within 5 s"):
        await queued
    assert pool.queued("m") == 0 and len(neuron.generate_requests) == 1
    hold.set()
    await texts(busy)


async def test_a_replica_becoming_ready_takes_the_waiters() -> None:
    a, b = FakeNeuron("adm-pool-ready-a:1"), FakeNeuron("adm-pool-ready-b:1", ready=False)
    hold = _held(a)
    b.script = [text("from b"), DONE]
    time = ManualClock()
    pool = _pool([a, b], time, cap=1)
    await pool.refresh()
    busy = pool.generate(_request(0))
    await anext(busy)
    waiting = asyncio.create_task(texts(pool.generate(_request(1))))
    await until(lambda: pool.queued("m") == 1)
    b.ready = True
    await pool.refresh()  # the health poll finds b ready: its slot is free
    assert await waiting == ["from b", "!"]
    hold.set()
    await texts(busy)


async def test_an_embedding_request_is_admitted_the_same_way() -> None:
    neuron = FakeNeuron("adm-pool-embed:1")
    hold = _held(neuron)
    time = ManualClock()
    pool = _pool([neuron], time, cap=1, size=0)
    await pool.refresh()
    busy = pool.generate(_request(0))
    await anext(busy)
    with pytest.raises(ModelOverloadedError):
        await pool.embed(pb.EmbedRequest(request_id="e", model="m"))
    hold.set()
    await texts(busy)
    assert (await pool.embed(pb.EmbedRequest(request_id="e", model="m"))).embeddings


async def test_an_adapters_request_queues_as_its_base_for_the_same_slots() -> None:
    # One slot on the replica, taken by the base model: the adapter's request
    # waits in the base's queue (not a queue of its own that would see the
    # slot free too) and runs once the base's request ends.
    neuron = FakeNeuron("adm-pool-adapter:1")
    neuron.models.append(pb.ModelInfo(id="a", parent="m", max_context_length=100))
    hold = _held(neuron)
    pool = _pool([neuron], ManualClock(), cap=1)
    await pool.refresh()
    first = pool.generate(_request(1))
    await anext(first)
    adapter = pb.GenerateRequest(request_id="req-a", model="a")
    second = asyncio.ensure_future(anext(pool.generate(adapter)))
    await until(lambda: pool.queued("m") == 1)
    assert neuron.streams_open == 1 and not second.done()
    neuron.script = [text("adapted"), DONE]
    hold.set()
    await texts(first)
    await second


async def test_the_slot_a_tenants_request_frees_is_held_for_its_next_one() -> None:
    # Settled before its slot frees: the pool's wake-up, which comes with
    # the freeing, does not hand the slot to the backlog first.
    a, b = FakeNeuron("adm-pool-hold-a:1"), FakeNeuron("adm-pool-hold-b:1")
    quiet_hold, _ = _held(a), _held(b)
    time = ManualClock()
    pool = _pool([a, b], time, cap=1, policy=FirstCandidate())
    await pool.refresh()
    quiet, noisy = RouteHints(tenant="quiet"), RouteHints(tenant="noisy")
    first = pool.generate(_request(1), quiet)
    await anext(first)  # on a
    running = pool.generate(_request(2), noisy)
    await anext(running)  # on b
    waiting = asyncio.ensure_future(anext(pool.generate(_request(3), noisy)))
    await until(lambda: pool.queued("m") == 1)
    quiet_hold.set()
    await texts(first)
    for _ in range(10):
        await asyncio.sleep(0)
    assert pool.queued("m") == 1  # noisy's waiter did not take quiet's slot
    assert await texts(pool.generate(_request(4), quiet)) == ["first", "!"]
    assert [r.request_id for r in a.generate_requests] == ["req-1", "req-4"]
    time.advance(1.0)  # held again after it; past the hold, noisy's waiter takes it
    await waiting
    waiting.cancel()
