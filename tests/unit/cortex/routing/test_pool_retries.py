"""NeuronPool's retries with in-memory neurons: a failure before the first
token is tried on another neuron, up to max_retries; after it, or caused by
the request, it is not; the policy hears of each attempt."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from axon.errors import (
    InternalError,
    InvalidRequestError,
    UnavailableError,
)
from axon.v1 import neuron_pb2 as pb
from cortex.routing.policy import Outcome
from tests.unit.cortex.routing import pools
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, text


def _retries(address: str) -> float:
    labels = {"model": "m", "replica": address}
    return REGISTRY.get_sample_value("neuraxis_retries_total", labels) or 0.0


@pytest.mark.parametrize("error", [UnavailableError("down"), InternalError("boom")])
async def test_a_failure_before_the_first_token_is_retried_on_another_neuron(
    error: UnavailableError | InternalError,
) -> None:
    a, b = FakeNeuron(f"retry-a-{error.kind}:1"), FakeNeuron(f"retry-b-{error.kind}:1")
    a.script = [error]
    b.script = [text("from b"), DONE]
    pool = await pools.polled(pools.fake_pool([a, b], policy=pools.InOrder()))
    before = _retries(a.address)
    assert await pools.texts(pool.generate(pools.request())) == ["from b", "!"]
    assert len(a.generate_requests) == len(b.generate_requests) == 1
    assert _retries(a.address) == before + 1


async def test_an_unavailable_neuron_is_out_until_its_next_good_poll() -> None:
    a, b = FakeNeuron("out-a:1"), FakeNeuron("out-b:1")
    a.script = [UnavailableError("down")]
    policy = pools.InOrder()
    pool = await pools.polled(pools.fake_pool([a, b], policy=policy))
    await pools.texts(pool.generate(pools.request()))
    await pools.texts(pool.generate(pools.request()))
    assert len(a.generate_requests) == 1  # not tried again
    await pool.refresh()
    a.script = [text("a again"), DONE]
    assert await pools.texts(pool.generate(pools.request())) == ["a again", "!"]


async def test_a_failure_after_the_first_token_is_not_retried() -> None:
    a, b = FakeNeuron("late-a:1"), FakeNeuron("late-b:1")
    a.script = [text("partial"), UnavailableError("gone mid-stream")]
    pool = await pools.polled(pools.fake_pool([a, b], policy=pools.InOrder()))
    received: list[str] = []
    with pytest.raises(UnavailableError):
        async for response in pool.generate(pools.request()):
            received.extend(c.text for c in response.choices)
    assert received == ["partial"]
    assert not b.generate_requests


async def test_a_request_the_neuron_rejects_is_not_retried() -> None:
    a, b = FakeNeuron("reject-a:1"), FakeNeuron("reject-b:1")
    a.script = [InvalidRequestError("bad", param="messages")]
    pool = await pools.polled(pools.fake_pool([a, b], policy=pools.InOrder()))
    with pytest.raises(InvalidRequestError):
        await pools.texts(pool.generate(pools.request()))
    assert not b.generate_requests


@pytest.mark.parametrize("max_retries", [0, 1, 2])
async def test_retries_stop_at_max_retries(max_retries: int) -> None:
    neurons = [FakeNeuron(f"max{max_retries}-{i}:1") for i in range(4)]
    for n in neurons:
        n.script = [InternalError("boom")]
    pool = await pools.polled(
        pools.fake_pool(neurons, policy=pools.InOrder(), max_retries=max_retries)
    )
    with pytest.raises(InternalError):
        await pools.texts(pool.generate(pools.request()))
    assert [len(n.generate_requests) for n in neurons] == [1] * (max_retries + 1) + [0] * (
        3 - max_retries
    )


async def test_with_no_other_neuron_the_failure_is_raised() -> None:
    a = FakeNeuron("alone:1")
    a.script = [UnavailableError("down")]
    pool = await pools.polled(pools.fake_pool([a], max_retries=3))
    with pytest.raises(UnavailableError, match="down"):
        await pools.texts(pool.generate(pools.request()))
    assert len(a.generate_requests) == 1


async def test_after_a_retry_the_failed_neurons_count_goes_down_not_the_new_ones() -> None:
    a, b = FakeNeuron("count-a:1"), FakeNeuron("count-b:1")
    hold = asyncio.Event()
    a.script = [InternalError("boom")]  # a stays ready, so it stays a candidate
    b.script = [text("b"), hold, DONE]
    policy = pools.InOrder()
    pool = await pools.polled(pools.fake_pool([a, b], policy=policy))
    stream = pool.generate(pools.request("m", "req-retried"))
    await pools.first_message(stream)
    a.script = [text("a"), DONE]
    await pools.texts(pool.generate(pools.request("m", "req-probe")))
    hold.set()
    await pools.texts(stream)
    await pools.texts(pool.generate(pools.request("m", "req-after")))
    shown = {route.request_id: counts for route, counts in policy.seen if route.attempt == 0}
    # While the retried request runs on b: a has nothing in flight, b has it.
    assert shown["req-probe"] == [("count-a:1", 0), ("count-b:1", 1)]
    assert shown["req-after"] == [("count-a:1", 0), ("count-b:1", 0)]


async def test_the_policy_hears_of_each_attempt_and_how_it_ended() -> None:
    a, b = FakeNeuron("hooks-a:1"), FakeNeuron("hooks-b:1")
    a.script = [InternalError("boom")]
    b.script = [text("b"), asyncio.Event(), DONE]  # never released: cancelled
    policy = pools.InOrder()
    pool = await pools.polled(pools.fake_pool([a, b], policy=policy))
    stream = pool.generate(pools.request())
    await pools.first_message(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    a.script = [text("a"), DONE]
    await pools.texts(pool.generate(pools.request()))
    assert policy.dispatched == [("hooks-a:1", 0), ("hooks-b:1", 1), ("hooks-a:1", 0)]
    assert policy.completed == [
        ("hooks-a:1", 0, Outcome.FAILED),
        ("hooks-b:1", 1, Outcome.CANCELLED),
        ("hooks-a:1", 0, Outcome.OK),
    ]


async def test_an_embedding_is_retried_on_another_neuron() -> None:
    a = FakeNeuron("embed-a:1", models=["e"], task=pb.MODEL_TASK_EMBED)
    b = FakeNeuron("embed-b:1", models=["e"], task=pb.MODEL_TASK_EMBED)
    a.embed_error = UnavailableError("down")
    pool = await pools.polled(pools.fake_pool([a, b], policy=pools.InOrder(), expected=["e"]))
    response = await pool.embed(pb.EmbedRequest(request_id="req-e", model="e"))
    assert list(response.embeddings[0].values) == [1.0]
    assert len(a.embed_requests) == len(b.embed_requests) == 1


async def test_an_embedding_the_neuron_rejects_is_not_retried() -> None:
    a = FakeNeuron("embed-bad-a:1", models=["e"], task=pb.MODEL_TASK_EMBED)
    b = FakeNeuron("embed-bad-b:1", models=["e"], task=pb.MODEL_TASK_EMBED)
    a.embed_error = InvalidRequestError("too long", param="input")
    pool = await pools.polled(pools.fake_pool([a, b], policy=pools.InOrder(), expected=["e"]))
    with pytest.raises(InvalidRequestError):
        await pool.embed(pb.EmbedRequest(request_id="req-e", model="e"))
    assert not b.embed_requests
