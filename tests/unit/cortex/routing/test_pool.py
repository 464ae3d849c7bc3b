"""NeuronPool with in-memory neurons: which neuron takes a request, the
outstanding counts and hints the policy sees, and what the API layer reads
of it (served and missing models, task checks, labels). Retries are
test_pool_retries.py's, membership test_pool_membership.py's, engine load
and prefixes test_pool_load.py's, faults test_pool_faults.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from axon.errors import (
    InternalError,
    InvalidRequestError,
    ModelNotFoundError,
    UnavailableError,
)
from axon.v1 import neuron_pb2 as pb
from cortex.routing.policy import Candidate, RouteHints, RouteRequest, RoutingPolicy
from tests.unit.cortex.routing import pools
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, text

# --- pick -------------------------------------------------------------------


async def test_a_request_goes_to_the_neuron_with_fewest_outstanding() -> None:
    a, b = FakeNeuron("pick-a:1"), FakeNeuron("pick-b:1")
    hold = asyncio.Event()
    a.script = b.script = [text("first"), hold, DONE]
    pool = await pools.polled(pools.fake_pool([a, b]))
    held = pool.generate(pools.request())
    await pools.first_message(held)
    busy, idle = (a, b) if a.streams_open else (b, a)
    idle.script = [text("x"), DONE]
    for _ in range(4):  # rotation would alternate; the busy neuron never wins
        assert await pools.texts(pool.generate(pools.request())) == ["x", "!"]
    assert len(idle.generate_requests) == 4
    assert len(busy.generate_requests) == 1
    hold.set()
    await pools.texts(held)


async def test_equal_neurons_take_requests_in_turn() -> None:
    neurons = [FakeNeuron(f"turn-{i}:1") for i in range(3)]
    pool = await pools.polled(pools.fake_pool(neurons))
    for _ in range(6):
        await pools.texts(pool.generate(pools.request()))
    assert [len(n.generate_requests) for n in neurons] == [2, 2, 2]


async def test_only_ready_neurons_serving_the_model_are_picked() -> None:
    serving = FakeNeuron("only-ok:1")
    other_model = FakeNeuron("only-other:1", models=["other"])
    draining = FakeNeuron("only-draining:1")
    down = FakeNeuron("only-down:1")
    loading = FakeNeuron("only-loading:1", ready=False)
    pool = await pools.polled(
        pools.fake_pool([other_model, draining, down, loading, serving], expected=["m", "other"])
    )
    # Both served "m" a moment ago: one now says it is not ready, one is gone.
    draining.ready = False
    down.reachable = False
    await pool.refresh()
    for _ in range(5):
        await pools.texts(pool.generate(pools.request()))
    assert len(serving.generate_requests) == 5
    for neuron in (other_model, draining, down, loading):
        assert not neuron.generate_requests, neuron.address


async def test_an_unknown_model_is_model_not_found() -> None:
    pool = await pools.polled(pools.fake_pool([FakeNeuron("unknown-a:1")]))
    with pytest.raises(ModelNotFoundError):
        await pools.texts(pool.generate(pools.request("no-such-model")))


async def test_a_known_model_with_no_ready_neuron_is_unavailable() -> None:
    pool = await pools.polled(pools.fake_pool([FakeNeuron("loading-a:1", ready=False)]))
    with pytest.raises(UnavailableError):
        await pools.texts(pool.generate(pools.request("m")))


async def test_any_model_is_unavailable_while_a_neuron_was_never_seen() -> None:
    # The neuron that has not answered yet may serve the model.
    silent = FakeNeuron("never-seen:1")
    silent.reachable = False
    pool = await pools.polled(pools.fake_pool([FakeNeuron("seen:1")], expected=[]))
    pool_with_silent = await pools.polled(
        pools.fake_pool([FakeNeuron("seen-2:1"), silent], expected=[])
    )
    with pytest.raises(ModelNotFoundError):
        await pools.texts(pool.generate(pools.request("other")))
    with pytest.raises(UnavailableError):
        await pools.texts(pool_with_silent.generate(pools.request("other")))


async def test_the_policy_sees_the_request_hints_and_the_pools_clock() -> None:
    policy = pools.InOrder()
    pool = await pools.polled(
        pools.fake_pool([FakeNeuron("hints:1")], policy=policy, clock=lambda: 42.5)
    )
    hints = RouteHints(previous_response_id="resp_1", prompt_cache_key="k")
    await pools.texts(pool.generate(pools.request(request_id="req-h"), hints=hints))
    (route, _), *_ = policy.seen
    assert route == RouteRequest(model="m", request_id="req-h", now=42.5, hints=hints, attempt=0)


async def test_a_policy_that_returns_no_offered_candidate_is_an_internal_error() -> None:
    class Stranger(RoutingPolicy):
        def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
            return Candidate(address=candidates[0].address, outstanding=0)

    pool = await pools.polled(pools.fake_pool([FakeNeuron("stranger:1")], policy=Stranger()))
    with pytest.raises(InternalError):
        await pools.texts(pool.generate(pools.request()))


# --- what the API layer reads ----------------------------------------------


async def test_served_and_missing_models_follow_readiness() -> None:
    chat = FakeNeuron("models-chat:1", models=["m"])
    embed = FakeNeuron("models-embed:1", models=["e"], task=pb.MODEL_TASK_EMBED, ready=False)
    pool = await pools.polled(pools.fake_pool([chat, embed], expected=["m", "e"]))
    assert sorted(pool.served_models()) == ["m"]
    assert pool.missing_models() == ["e"]
    embed.ready = True
    await pool.refresh()
    assert sorted(pool.served_models()) == ["e", "m"]
    assert pool.missing_models() == []


async def test_check_task_names_the_models_that_can_serve_the_endpoint() -> None:
    chat = FakeNeuron("task-chat:1", models=["m"])
    embed = FakeNeuron("task-embed:1", models=["e"], task=pb.MODEL_TASK_EMBED)
    pool = await pools.polled(pools.fake_pool([chat, embed], expected=["m", "e"]))
    pool.check_task("m", pb.MODEL_TASK_GENERATE, "/v1/chat/completions")
    with pytest.raises(InvalidRequestError, match="Models that can: e"):
        pool.check_task("m", pb.MODEL_TASK_EMBED, "/v1/embeddings")


async def test_a_clients_model_name_becomes_a_label_only_when_known() -> None:
    pool = await pools.polled(
        pools.fake_pool([FakeNeuron("label:1", models=["served"])], expected=["m"])
    )
    assert pool.model_label("m") == "m"
    assert pool.model_label("served") == "served"
    assert pool.model_label("made-up") == "unknown"
