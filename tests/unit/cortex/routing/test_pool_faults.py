"""NeuronPool's fault handling with in-memory neurons (test_pool.py has the
rest; this file keeps it from growing past a readable size): the request's
own errors, outlier ejection, the retry budget, deadlines, and a neuron the
health poll finds gone while requests wait on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from axon import grpc_limits
from axon.errors import (
    ContextLengthExceededError,
    DeadlineExceededError,
    EngineDiedError,
    InternalError,
    RequestTooLargeError,
    UnavailableError,
)
from axon.v1 import neuron_pb2 as pb
from cortex.routing.deadlines import Deadlines
from cortex.routing.ejection import EjectionOptions
from cortex.routing.pool import NeuronPool
from cortex.routing.retry_budget import RetryBudgetOptions
from harness.clock import ManualClock as Clock
from tests.unit.cortex.routing import pools
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, text


def _pool(
    neurons: Sequence[FakeNeuron],
    *,
    clock: Clock | None = None,
    max_retries: int = 2,
    deadlines: Deadlines | None = None,
    budget: RetryBudgetOptions | None = None,
    failures: int = 2,
) -> NeuronPool:
    return pools.fake_pool(
        neurons,
        policy=pools.InOrder(),
        clock=clock or time.monotonic,
        deadlines=deadlines,
        poll_interval_s=60,  # polled by the tests, when they want
        max_retries=max_retries,
        ejection=EjectionOptions(consecutive_failures=failures, base_s=30, max_s=300),
        retry_budget=budget,
    )


def _request(content: str = "") -> pb.GenerateRequest:
    return pb.GenerateRequest(request_id="req-f", model="m", prompt=content)


def _ready(pool: NeuronPool) -> dict[str, bool]:
    return {address: info is not None and info.ready for address, info in pool.neurons()}


# --- the request's own errors -------------------------------------------------------


@pytest.mark.parametrize(
    "error", [ContextLengthExceededError("too long"), RequestTooLargeError("too big")]
)
async def test_the_requests_own_error_is_returned_not_retried_and_not_held_against_the_neuron(
    error: ContextLengthExceededError | RequestTooLargeError,
) -> None:
    a, b = FakeNeuron("own-a:1"), FakeNeuron("own-b:1")
    a.script = [error]
    pool = await pools.polled(_pool([a, b], failures=1))
    for _ in range(3):
        with pytest.raises(type(error)):
            await pools.texts(pool.generate(_request()))
    assert not b.generate_requests
    a.script = [text("still in"), DONE]
    assert await pools.texts(pool.generate(_request())) == ["still in", "!"]  # never ejected


async def test_a_request_past_the_grpc_message_limit_is_refused_before_any_neuron(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(grpc_limits, "MAX_MESSAGE_BYTES", 1000)
    a = FakeNeuron("size-a:1")
    pool = await pools.polled(_pool([a]))
    with pytest.raises(RequestTooLargeError, match="over the limit of 1000 bytes"):
        await pools.texts(pool.generate(_request("x" * 2000)))
    assert not a.generate_requests
    assert await pools.texts(pool.generate(_request("x" * 100))) == ["hi", "!"]


# --- outlier ejection ---------------------------------------------------------------


async def test_a_neuron_failing_in_a_row_is_ejected_until_its_probation() -> None:
    clock = Clock()
    a, b = FakeNeuron("ej-a:1"), FakeNeuron("ej-b:1")
    a.script = [InternalError("boom")]
    pool = await pools.polled(_pool([a, b], clock=clock, failures=2))
    for _ in range(2):  # each fails on a, is retried on b
        assert await pools.texts(pool.generate(_request())) == ["hi", "!"]
    assert len(a.generate_requests) == 2
    for _ in range(5):
        await pools.texts(pool.generate(_request()))
    assert len(a.generate_requests) == 2  # ejected: not even tried first
    clock.now += 30  # probation: tried again, one failure ejects it again
    await pools.texts(pool.generate(_request()))
    assert len(a.generate_requests) == 3
    await pools.texts(pool.generate(_request()))
    assert len(a.generate_requests) == 3
    clock.now += 60  # twice the base the second time
    a.script = [text("a is back"), DONE]
    assert await pools.texts(pool.generate(_request())) == ["a is back", "!"]


async def test_the_last_ready_replica_of_a_model_is_never_ejected() -> None:
    a = FakeNeuron("last-a:1")
    a.script = [InternalError("boom")]
    pool = await pools.polled(_pool([a], failures=1))
    for _ in range(3):
        with pytest.raises(InternalError):
            await pools.texts(pool.generate(_request()))
    assert len(a.generate_requests) == 3


async def test_an_ejected_neuron_still_serves_when_every_other_is_gone() -> None:
    a, b = FakeNeuron("gone-a:1"), FakeNeuron("gone-b:1")
    a.script = [InternalError("boom")]
    pool = await pools.polled(_pool([a, b], failures=1))
    await pools.texts(pool.generate(_request()))  # a ejected, b answered
    b.reachable = False
    await pool.refresh()
    a.script = [text("a"), DONE]
    assert await pools.texts(pool.generate(_request())) == ["a", "!"]


# --- the retry budget ---------------------------------------------------------------


async def test_past_the_budget_a_failure_is_returned_instead_of_retried() -> None:
    a, b = FakeNeuron("budget-a:1"), FakeNeuron("budget-b:1")
    a.script = [InternalError("boom")]
    pool = await pools.polled(_pool([a, b], budget=RetryBudgetOptions(ratio=0, minimum=0)))
    with pytest.raises(InternalError):
        await pools.texts(pool.generate(_request()))
    assert not b.generate_requests


async def test_a_request_during_which_an_engine_died_is_retried_once() -> None:
    neurons = [FakeNeuron(f"died-{i}:1") for i in range(3)]
    for n in neurons:
        n.script = [EngineDiedError("the engine died")]
    pool = await pools.polled(_pool(neurons, max_retries=2))
    with pytest.raises(EngineDiedError):
        await pools.texts(pool.generate(_request()))
    assert [len(n.generate_requests) for n in neurons] == [1, 1, 0]


# --- deadlines ----------------------------------------------------------------------


async def test_no_first_token_in_time_is_retried_on_another_neuron() -> None:
    a, b = FakeNeuron("ttft-a:1"), FakeNeuron("ttft-b:1")
    a.script = [asyncio.Event(), DONE]  # never set: a hung engine
    deadlines = Deadlines(first_token_s=0.05, idle_s=5, total_s=5)
    pool = await pools.polled(_pool([a, b], deadlines=deadlines))
    assert await pools.texts(pool.generate(_request())) == ["hi", "!"]
    assert a.streams_open == 0  # the hung attempt was closed


async def test_a_stream_idle_past_its_deadline_ends_with_a_timeout() -> None:
    a, b = FakeNeuron("idle-a:1"), FakeNeuron("idle-b:1")
    a.script = [text("partial"), asyncio.Event(), DONE]
    deadlines = Deadlines(first_token_s=5, idle_s=0.05, total_s=5)
    pool = await pools.polled(_pool([a, b], deadlines=deadlines))
    received: list[str] = []
    with pytest.raises(DeadlineExceededError, match="idle deadline"):
        async for response in pool.generate(_request()):
            received.extend(c.text for c in response.choices)
    assert received == ["partial"]
    assert not b.generate_requests and a.streams_open == 0


async def test_the_idle_deadline_holds_when_another_task_reads_the_rest() -> None:
    # As in a streamed answer: the handler reads the first message, the
    # response's own task the rest.
    a = FakeNeuron("tasks-a:1")
    a.script = [text("first"), asyncio.Event(), DONE]
    deadlines = Deadlines(first_token_s=5, idle_s=0.05, total_s=5)
    pool = await pools.polled(_pool([a], deadlines=deadlines))
    stream = pool.generate(_request())

    async def first() -> pb.GenerateResponse:
        return await anext(stream)

    async def rest() -> list[str]:
        return await pools.texts(stream)

    await asyncio.create_task(first())
    with pytest.raises(DeadlineExceededError, match="idle deadline"):
        await asyncio.wait_for(asyncio.create_task(rest()), 2)


# --- a neuron the health poll finds gone ----------------------------------------------


async def _when(condition: object, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)


async def test_a_request_waiting_on_a_neuron_gone_silent_moves_to_another() -> None:
    a, b = FakeNeuron("silent-a:1"), FakeNeuron("silent-b:1")
    a.script = [asyncio.Event(), DONE]
    pool = await pools.polled(_pool([a, b]))
    answer = asyncio.create_task(pools.texts(pool.generate(_request())))
    await _when(lambda: a.streams_open == 1)
    a.reachable = False
    await pool.refresh()
    assert await asyncio.wait_for(answer, 2) == ["hi", "!"]
    assert a.streams_open == 0
    assert _ready(pool)["silent-a:1"] is True  # its last Info; the pool has it out


async def test_a_started_stream_on_a_neuron_gone_silent_ends_with_an_error() -> None:
    a, b = FakeNeuron("cut-a:1"), FakeNeuron("cut-b:1")
    a.script = [text("partial"), asyncio.Event(), DONE]
    pool = await pools.polled(_pool([a, b]))
    stream = pool.generate(_request())
    assert [c.text for c in (await anext(stream)).choices] == ["partial"]

    async def read() -> pb.GenerateResponse:
        return await anext(stream)

    reading = asyncio.create_task(read())
    await asyncio.sleep(0)  # the read is waiting on the neuron
    a.reachable = False
    await pool.refresh()
    with pytest.raises(UnavailableError, match="stopped answering its health checks"):
        await asyncio.wait_for(reading, 2)
    assert not b.generate_requests


async def test_a_slow_poll_of_a_neuron_whose_streams_flow_keeps_it_in() -> None:
    # cortex's own loop under load can make an Info poll miss its deadline;
    # a neuron whose stream messages arrive meanwhile is alive.
    a, b = FakeNeuron("flowing-a:1"), FakeNeuron("flowing-b:1")
    gate = asyncio.Event()
    a.script = [text("partial"), gate, text("rest"), DONE]
    clock = Clock()
    pool = await pools.polled(_pool([a, b], clock=clock))
    stream = pool.generate(_request())
    assert [c.text for c in (await anext(stream)).choices] == ["partial"]
    a.info_times_out = True
    clock.now += 0.5  # within the health timeout (1 s) of its last message
    await pool.refresh()
    gate.set()
    assert await asyncio.wait_for(pools.texts(stream), 2) == ["rest", "!"]
    a.script = [text("again"), DONE]  # still in rotation: the first choice
    assert await pools.texts(pool.generate(_request())) == ["again", "!"]


async def test_two_slow_polls_in_a_row_of_a_neuron_heard_from_long_ago_take_it_out() -> None:
    a, b = FakeNeuron("quiet-a:1"), FakeNeuron("quiet-b:1")
    a.script = [text("partial"), asyncio.Event(), DONE]
    clock = Clock()
    pool = await pools.polled(_pool([a, b], clock=clock))
    stream = pool.generate(_request())
    await anext(stream)

    async def read() -> pb.GenerateResponse:
        return await anext(stream)

    reading = asyncio.create_task(read())
    await asyncio.sleep(0)
    a.info_times_out = True
    clock.now += 1.5  # nothing heard for longer than the health timeout
    await pool.refresh()  # a loaded host's late answer: still in
    await asyncio.sleep(0)
    assert not reading.done()
    await pool.refresh()
    with pytest.raises(UnavailableError, match="stopped answering its health checks"):
        await asyncio.wait_for(reading, 2)


async def test_an_answer_between_slow_polls_starts_their_count_again() -> None:
    a, b = FakeNeuron("late-a:1"), FakeNeuron("late-b:1")
    clock = Clock()
    pool = await pools.polled(_pool([a, b], clock=clock))
    for _ in range(3):
        a.info_times_out = True
        await pool.refresh()
        a.info_times_out = False
        await pool.refresh()
    assert await pools.texts(pool.generate(_request())) == ["hi", "!"]
    assert a.generate_requests and not b.generate_requests


async def test_a_refused_poll_takes_a_neuron_out_at_once() -> None:
    a, b = FakeNeuron("gone-a:1"), FakeNeuron("gone-b:1")
    pool = await pools.polled(_pool([a, b]))
    a.reachable = False
    await pool.refresh()
    assert await pools.texts(pool.generate(_request())) == ["hi", "!"]
    assert b.generate_requests and not a.generate_requests
