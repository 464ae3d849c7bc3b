"""NeuronPool with in-memory neurons: which neuron takes a request, retries
before the first token, retirement while requests are in flight, and the
outstanding counts the policy sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from prometheus_client import REGISTRY

from axon.errors import (
    InternalError,
    InvalidRequestError,
    ModelNotFoundError,
    UnavailableError,
)
from axon.v1 import neuron_pb2 as pb
from cortex.routing.factory import PolicyOptions, PolicyTable
from cortex.routing.policy import (
    Candidate,
    EngineLoad,
    Outcome,
    RouteHints,
    RouteRequest,
    RoutingPolicy,
)
from cortex.routing.pool import NeuronPool
from cortex.routing.prefix import PrefixHasher
from harness.clock import ManualClock as Clock
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, Fleet, text


class InOrder(RoutingPolicy):
    """Takes the first candidate (the pool's order), so that a test knows
    which neuron an attempt goes to; records what it was shown and told."""

    def __init__(self) -> None:
        self.seen: list[tuple[RouteRequest, list[tuple[str, int]]]] = []
        self.dispatched: list[tuple[str, int]] = []
        self.completed: list[tuple[str, int, Outcome]] = []

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        self.seen.append((request, [(c.address, c.outstanding) for c in candidates]))
        return candidates[0]

    def on_dispatch(self, candidate: Candidate, request: RouteRequest) -> None:
        self.dispatched.append((candidate.address, request.attempt))

    def on_complete(self, address: str, request: RouteRequest, outcome: Outcome) -> None:
        self.completed.append((address, request.attempt, outcome))


def _pool(
    neurons: Sequence[FakeNeuron],
    *,
    policy: RoutingPolicy | None = None,
    max_retries: int = 1,
    expected: Sequence[str] = ("m",),
    fleet: Fleet | None = None,
    clock_value: float = 100.0,
) -> NeuronPool:
    return NeuronPool(
        neurons,
        expected_models=list(expected),
        poll_interval_s=0.05,
        request_timeout_s=5.0,
        max_retries=max_retries,
        client_factory=fleet or Fleet(),
        policy=policy,
        clock=lambda: clock_value,
    )


async def _polled(pool: NeuronPool) -> NeuronPool:
    """The pool once it has asked every neuron for its Info."""
    await pool.refresh()
    return pool


def _request(model: str = "m", request_id: str = "req-1") -> pb.GenerateRequest:
    return pb.GenerateRequest(request_id=request_id, model=model)


async def _texts(stream: AsyncIterator[pb.GenerateResponse]) -> list[str]:
    return [c.text async for r in stream for c in r.choices]


async def _first(stream: AsyncIterator[pb.GenerateResponse]) -> pb.GenerateResponse:
    """Read the first message, leaving the stream (and its dispatch) open."""
    return await anext(stream)


def _retries(address: str) -> float:
    labels = {"model": "m", "replica": address}
    return REGISTRY.get_sample_value("neuraxis_retries_total", labels) or 0.0


# --- pick -------------------------------------------------------------------


async def test_a_request_goes_to_the_neuron_with_fewest_outstanding() -> None:
    a, b = FakeNeuron("pick-a:1"), FakeNeuron("pick-b:1")
    hold = asyncio.Event()
    a.script = b.script = [text("first"), hold, DONE]
    pool = await _polled(_pool([a, b]))
    held = pool.generate(_request())
    await _first(held)
    busy, idle = (a, b) if a.streams_open else (b, a)
    idle.script = [text("x"), DONE]
    for _ in range(4):  # rotation would alternate; the busy neuron never wins
        assert await _texts(pool.generate(_request())) == ["x", "!"]
    assert len(idle.generate_requests) == 4
    assert len(busy.generate_requests) == 1
    hold.set()
    await _texts(held)


async def test_equal_neurons_take_requests_in_turn() -> None:
    neurons = [FakeNeuron(f"turn-{i}:1") for i in range(3)]
    pool = await _polled(_pool(neurons))
    for _ in range(6):
        await _texts(pool.generate(_request()))
    assert [len(n.generate_requests) for n in neurons] == [2, 2, 2]


async def test_only_ready_neurons_serving_the_model_are_picked() -> None:
    serving = FakeNeuron("only-ok:1")
    other_model = FakeNeuron("only-other:1", models=["other"])
    draining = FakeNeuron("only-draining:1")
    down = FakeNeuron("only-down:1")
    loading = FakeNeuron("only-loading:1", ready=False)
    pool = await _polled(
        _pool([other_model, draining, down, loading, serving], expected=["m", "other"])
    )
    # Both served "m" a moment ago: one now says it is not ready, one is gone.
    draining.ready = False
    down.reachable = False
    await pool.refresh()
    for _ in range(5):
        await _texts(pool.generate(_request()))
    assert len(serving.generate_requests) == 5
    for neuron in (other_model, draining, down, loading):
        assert not neuron.generate_requests, neuron.address


async def test_an_unknown_model_is_model_not_found() -> None:
    pool = await _polled(_pool([FakeNeuron("unknown-a:1")]))
    with pytest.raises(ModelNotFoundError):
        await _texts(pool.generate(_request("no-such-model")))


async def test_a_known_model_with_no_ready_neuron_is_unavailable() -> None:
    pool = await _polled(_pool([FakeNeuron("loading-a:1", ready=False)]))
    with pytest.raises(UnavailableError):
        await _texts(pool.generate(_request("m")))


async def test_any_model_is_unavailable_while_a_neuron_was_never_seen() -> None:
    # The neuron that has not answered yet may serve the model.
    silent = FakeNeuron("never-seen:1")
    silent.reachable = False
    pool = await _polled(_pool([FakeNeuron("seen:1")], expected=[]))
    pool_with_silent = await _polled(_pool([FakeNeuron("seen-2:1"), silent], expected=[]))
    with pytest.raises(ModelNotFoundError):
        await _texts(pool.generate(_request("other")))
    with pytest.raises(UnavailableError):
        await _texts(pool_with_silent.generate(_request("other")))


async def test_the_policy_sees_the_request_hints_and_the_pools_clock() -> None:
    policy = InOrder()
    pool = await _polled(_pool([FakeNeuron("hints:1")], policy=policy, clock_value=42.5))
    hints = RouteHints(previous_response_id="resp_1", prompt_cache_key="k")
    await _texts(pool.generate(_request(request_id="req-h"), hints=hints))
    (route, _), *_ = policy.seen
    assert route == RouteRequest(model="m", request_id="req-h", now=42.5, hints=hints, attempt=0)


async def test_a_policy_that_returns_no_offered_candidate_is_an_internal_error() -> None:
    class Stranger(RoutingPolicy):
        def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
            return Candidate(address=candidates[0].address, outstanding=0)

    pool = await _polled(_pool([FakeNeuron("stranger:1")], policy=Stranger()))
    with pytest.raises(InternalError):
        await _texts(pool.generate(_request()))


# --- retries ----------------------------------------------------------------


@pytest.mark.parametrize("error", [UnavailableError("down"), InternalError("boom")])
async def test_a_failure_before_the_first_token_is_retried_on_another_neuron(
    error: UnavailableError | InternalError,
) -> None:
    a, b = FakeNeuron(f"retry-a-{error.kind}:1"), FakeNeuron(f"retry-b-{error.kind}:1")
    a.script = [error]
    b.script = [text("from b"), DONE]
    pool = await _polled(_pool([a, b], policy=InOrder()))
    before = _retries(a.address)
    assert await _texts(pool.generate(_request())) == ["from b", "!"]
    assert len(a.generate_requests) == len(b.generate_requests) == 1
    assert _retries(a.address) == before + 1


async def test_an_unavailable_neuron_is_out_until_its_next_good_poll() -> None:
    a, b = FakeNeuron("out-a:1"), FakeNeuron("out-b:1")
    a.script = [UnavailableError("down")]
    policy = InOrder()
    pool = await _polled(_pool([a, b], policy=policy))
    await _texts(pool.generate(_request()))
    await _texts(pool.generate(_request()))
    assert len(a.generate_requests) == 1  # not tried again
    await pool.refresh()
    a.script = [text("a again"), DONE]
    assert await _texts(pool.generate(_request())) == ["a again", "!"]


async def test_a_failure_after_the_first_token_is_not_retried() -> None:
    a, b = FakeNeuron("late-a:1"), FakeNeuron("late-b:1")
    a.script = [text("partial"), UnavailableError("gone mid-stream")]
    pool = await _polled(_pool([a, b], policy=InOrder()))
    received: list[str] = []
    with pytest.raises(UnavailableError):
        async for response in pool.generate(_request()):
            received.extend(c.text for c in response.choices)
    assert received == ["partial"]
    assert not b.generate_requests


async def test_a_request_the_neuron_rejects_is_not_retried() -> None:
    a, b = FakeNeuron("reject-a:1"), FakeNeuron("reject-b:1")
    a.script = [InvalidRequestError("bad", param="messages")]
    pool = await _polled(_pool([a, b], policy=InOrder()))
    with pytest.raises(InvalidRequestError):
        await _texts(pool.generate(_request()))
    assert not b.generate_requests


@pytest.mark.parametrize("max_retries", [0, 1, 2])
async def test_retries_stop_at_max_retries(max_retries: int) -> None:
    neurons = [FakeNeuron(f"max{max_retries}-{i}:1") for i in range(4)]
    for n in neurons:
        n.script = [InternalError("boom")]
    pool = await _polled(_pool(neurons, policy=InOrder(), max_retries=max_retries))
    with pytest.raises(InternalError):
        await _texts(pool.generate(_request()))
    assert [len(n.generate_requests) for n in neurons] == [1] * (max_retries + 1) + [0] * (
        3 - max_retries
    )


async def test_with_no_other_neuron_the_failure_is_raised() -> None:
    a = FakeNeuron("alone:1")
    a.script = [UnavailableError("down")]
    pool = await _polled(_pool([a], max_retries=3))
    with pytest.raises(UnavailableError, match="down"):
        await _texts(pool.generate(_request()))
    assert len(a.generate_requests) == 1


async def test_after_a_retry_the_failed_neurons_count_goes_down_not_the_new_ones() -> None:
    a, b = FakeNeuron("count-a:1"), FakeNeuron("count-b:1")
    hold = asyncio.Event()
    a.script = [InternalError("boom")]  # a stays ready, so it stays a candidate
    b.script = [text("b"), hold, DONE]
    policy = InOrder()
    pool = await _polled(_pool([a, b], policy=policy))
    stream = pool.generate(_request("m", "req-retried"))
    await _first(stream)
    a.script = [text("a"), DONE]
    await _texts(pool.generate(_request("m", "req-probe")))
    hold.set()
    await _texts(stream)
    await _texts(pool.generate(_request("m", "req-after")))
    shown = {route.request_id: counts for route, counts in policy.seen if route.attempt == 0}
    # While the retried request runs on b: a has nothing in flight, b has it.
    assert shown["req-probe"] == [("count-a:1", 0), ("count-b:1", 1)]
    assert shown["req-after"] == [("count-a:1", 0), ("count-b:1", 0)]


async def test_the_policy_hears_of_each_attempt_and_how_it_ended() -> None:
    a, b = FakeNeuron("hooks-a:1"), FakeNeuron("hooks-b:1")
    a.script = [InternalError("boom")]
    b.script = [text("b"), asyncio.Event(), DONE]  # never released: cancelled
    policy = InOrder()
    pool = await _polled(_pool([a, b], policy=policy))
    stream = pool.generate(_request())
    await _first(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    a.script = [text("a"), DONE]
    await _texts(pool.generate(_request()))
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
    pool = await _polled(_pool([a, b], policy=InOrder(), expected=["e"]))
    response = await pool.embed(pb.EmbedRequest(request_id="req-e", model="e"))
    assert list(response.embeddings[0].values) == [1.0]
    assert len(a.embed_requests) == len(b.embed_requests) == 1


async def test_an_embedding_the_neuron_rejects_is_not_retried() -> None:
    a = FakeNeuron("embed-bad-a:1", models=["e"], task=pb.MODEL_TASK_EMBED)
    b = FakeNeuron("embed-bad-b:1", models=["e"], task=pb.MODEL_TASK_EMBED)
    a.embed_error = InvalidRequestError("too long", param="input")
    pool = await _polled(_pool([a, b], policy=InOrder(), expected=["e"]))
    with pytest.raises(InvalidRequestError):
        await pool.embed(pb.EmbedRequest(request_id="req-e", model="e"))
    assert not b.embed_requests


# --- membership and retirement ---------------------------------------------


async def test_the_endpoint_table_adds_neurons_through_the_client_factory() -> None:
    fleet = Fleet()
    pool = await _polled(_pool([], fleet=fleet))
    with pytest.raises(UnavailableError):
        await _texts(pool.generate(_request()))
    await pool.update(["table-a:1"])
    assert await _texts(pool.generate(_request())) == ["hi", "!"]
    assert len(fleet.neurons["table-a:1"].generate_requests) == 1
    assert [address for address, _ in pool.neurons()] == ["table-a:1"]


async def test_a_retired_neuron_finishes_its_requests_and_is_closed_after_the_last() -> None:
    fleet = Fleet()
    old, new = fleet("retire-old:1"), fleet("retire-new:1")
    holds = [asyncio.Event(), asyncio.Event()]
    old.script = [text("old"), holds[0], holds[1], DONE]
    pool = await _polled(_pool([old], fleet=fleet))
    first, second = pool.generate(_request()), pool.generate(_request())
    await _first(first)
    await _first(second)
    await pool.update(["retire-new:1"])
    assert not old.closed
    assert await _texts(pool.generate(_request())) == ["hi", "!"]  # no new work on old
    assert len(old.generate_requests) == 2
    assert len(new.generate_requests) == 1
    holds[0].set()
    holds[1].set()
    assert await _texts(first) == ["!"]
    assert not old.closed  # the second request is still in flight
    assert await _texts(second) == ["!"]
    assert old.closed
    assert not new.closed


async def test_an_idle_retired_neuron_is_closed_at_once() -> None:
    fleet = Fleet()
    idle = fleet("retire-idle:1")
    pool = await _polled(_pool([idle], fleet=fleet))
    await pool.update([])
    assert idle.closed
    assert pool.neurons() == []


async def test_the_background_poll_brings_a_neuron_in_once_it_is_ready() -> None:
    loading = FakeNeuron("poll-a:1", ready=False)
    pool = _pool([loading])
    await pool.start()
    try:
        assert pool.missing_models() == ["m"]
        loading.ready = True
        deadline = asyncio.get_running_loop().time() + 5.0
        while pool.missing_models() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert pool.missing_models() == []
        assert await _texts(pool.generate(_request())) == ["hi", "!"]
    finally:
        await pool.stop()


async def test_stop_closes_every_neuron() -> None:
    a, b = FakeNeuron("stop-a:1"), FakeNeuron("stop-b:1")
    pool = _pool([a, b])
    await pool.start()
    await pool.stop()
    assert a.closed and b.closed


# --- what the API layer reads ----------------------------------------------


async def test_served_and_missing_models_follow_readiness() -> None:
    chat = FakeNeuron("models-chat:1", models=["m"])
    embed = FakeNeuron("models-embed:1", models=["e"], task=pb.MODEL_TASK_EMBED, ready=False)
    pool = await _polled(_pool([chat, embed], expected=["m", "e"]))
    assert sorted(pool.served_models()) == ["m"]
    assert pool.missing_models() == ["e"]
    embed.ready = True
    await pool.refresh()
    assert sorted(pool.served_models()) == ["e", "m"]
    assert pool.missing_models() == []


async def test_check_task_names_the_models_that_can_serve_the_endpoint() -> None:
    chat = FakeNeuron("task-chat:1", models=["m"])
    embed = FakeNeuron("task-embed:1", models=["e"], task=pb.MODEL_TASK_EMBED)
    pool = await _polled(_pool([chat, embed], expected=["m", "e"]))
    pool.check_task("m", pb.MODEL_TASK_GENERATE, "/v1/chat/completions")
    with pytest.raises(InvalidRequestError, match="Models that can: e"):
        pool.check_task("m", pb.MODEL_TASK_EMBED, "/v1/embeddings")


async def test_a_clients_model_name_becomes_a_label_only_when_known() -> None:
    pool = await _polled(_pool([FakeNeuron("label:1", models=["served"])], expected=["m"]))
    assert pool.model_label("m") == "m"
    assert pool.model_label("served") == "served"
    assert pool.model_label("made-up") == "unknown"


# --- engine load and prefixes -----------------------------------------------


class Recorder(InOrder):
    """InOrder that keeps the whole candidates and routes it was shown, and
    may ask for prefix hashes."""

    def __init__(self, hasher: PrefixHasher | None = None) -> None:
        super().__init__()
        self.prefix_hasher = hasher
        self.candidates: list[list[Candidate]] = []
        self.routes: list[RouteRequest] = []

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        self.candidates.append(list(candidates))
        self.routes.append(request)
        return super().select(candidates, request)


def _timed_pool(
    neurons: Sequence[FakeNeuron],
    policy: RoutingPolicy | PolicyTable,
    clock: Clock,
    load_interval_s: float = 0.5,
) -> NeuronPool:
    return NeuronPool(
        neurons,
        expected_models=["m"],
        poll_interval_s=0.05,
        request_timeout_s=5.0,
        max_retries=1,
        client_factory=Fleet(),
        policy=policy,
        clock=clock,
        load_interval_s=load_interval_s,
    )


async def test_the_engine_load_poll_feeds_the_candidates() -> None:
    a, b = FakeNeuron("load-a:1"), FakeNeuron("load-b:1")
    a.waiting = 4
    policy, clock = Recorder(), Clock(50.0)
    pool = await _polled(_timed_pool([a, b], policy, clock))
    await _texts(pool.generate(_request()))
    assert [c.load for c in policy.candidates[0]] == [None, None]  # not polled yet
    await pool.refresh_load()
    clock.now = 51.0
    await _texts(pool.generate(_request()))
    assert [c.load for c in policy.candidates[1]] == [
        EngineLoad(running=0, waiting=4, measured_at=50.0),
        EngineLoad(running=0, waiting=0, measured_at=50.0),
    ]
    assert policy.routes[1].now == 51.0


async def test_the_kv_cache_usage_reaches_the_candidates_when_reported() -> None:
    a = FakeNeuron("load-kv:1")
    a.kv_cache_usage = 0.625
    policy, clock = Recorder(), Clock(5.0)
    pool = await _polled(_timed_pool([a], policy, clock))
    await pool.refresh_load()
    await _texts(pool.generate(_request()))
    assert policy.candidates[0][0].load == EngineLoad(
        running=0, waiting=0, measured_at=5.0, kv_cache_usage=0.625
    )


async def test_a_load_report_carries_our_own_count_when_it_came() -> None:
    # What the engine says minus this count is other senders' work
    # (load.effective_load); the count is the one at the report, not later.
    a = FakeNeuron("load-own:1")
    hold = asyncio.Event()
    a.script = [text("x"), hold, DONE]
    policy, clock = Recorder(), Clock(7.0)
    pool = await _polled(_timed_pool([a], policy, clock))
    stream = pool.generate(_request())
    await _first(stream)  # one request of ours in flight
    await pool.refresh_load()
    hold.set()
    await _texts(stream)
    await _texts(pool.generate(_request("m", "req-2")))
    load = policy.candidates[-1][0].load
    assert load is not None and (load.running, load.own) == (1, 1)


async def test_a_stale_engine_load_no_longer_steers_requests() -> None:
    a, b = FakeNeuron("stale-a:1"), FakeNeuron("stale-b:1")
    a.waiting = 5  # other cortex processes keep a's engine busy
    clock = Clock(100.0)
    table = PolicyTable("power_of_two", options=PolicyOptions(load_max_age_s=2.0, seed=5))
    pool = await _polled(_timed_pool([a, b], table, clock))
    await pool.refresh_load()
    for _ in range(10):
        await _texts(pool.generate(_request()))
    assert not a.generate_requests
    clock.now = 102.5  # no report since: a's is too old to trust
    for _ in range(20):
        await _texts(pool.generate(_request()))
    assert a.generate_requests


async def test_the_background_poll_keeps_the_engine_load_current() -> None:
    a = FakeNeuron("load-bg:1")
    policy = Recorder()
    pool = _timed_pool([a], policy, Clock(1.0), load_interval_s=0.01)
    await pool.start()
    try:
        a.waiting = 3
        deadline = asyncio.get_running_loop().time() + 5.0
        seen = None
        while asyncio.get_running_loop().time() < deadline:
            await _texts(pool.generate(_request()))
            seen = policy.candidates[-1][0].load
            if seen is not None and seen.waiting == 3:
                break
            await asyncio.sleep(0.01)
        assert seen == EngineLoad(running=0, waiting=3, measured_at=1.0)
    finally:
        await pool.stop()


async def test_an_unreachable_neurons_last_load_stays_with_its_time() -> None:
    a = FakeNeuron("load-gone:1")
    a.waiting = 2
    policy, clock = Recorder(), Clock(10.0)
    pool = await _polled(_timed_pool([a], policy, clock))
    await pool.refresh_load()
    a.reachable = False
    clock.now = 20.0
    await pool.refresh_load()  # fails; the policy judges the old value's age
    a.reachable = True
    await _texts(pool.generate(_request()))
    assert policy.candidates[0][0].load == EngineLoad(running=0, waiting=2, measured_at=10.0)


async def test_a_prefix_policy_gets_the_hashes_and_a_retry_keeps_them() -> None:
    a, b = FakeNeuron("prefix-a:1"), FakeNeuron("prefix-b:1")
    a.script = [InternalError("boom")]
    hasher = PrefixHasher(block_bytes=16, max_blocks=4)
    policy = Recorder(hasher)
    pool = await _polled(_timed_pool([a, b], policy, Clock(1.0)))
    request = pb.GenerateRequest(
        request_id="req-p",
        model="m",
        messages=[
            pb.ChatMessage(
                role="system",
                content="A system prompt that is long enough to fill all four blocks.",
            )
        ],
    )
    hints = RouteHints(prompt_cache_key="tenant")
    await _texts(pool.generate(request, hints=hints))
    expected = hasher.blocks(request, salt="tenant")
    assert len(expected) == 4
    assert [(r.attempt, r.prefix) for r in policy.routes] == [(0, expected), (1, expected)]


async def test_a_policy_without_a_hasher_gets_no_prefix() -> None:
    policy = Recorder()
    pool = await _polled(_timed_pool([FakeNeuron("prefix-none:1")], policy, Clock(1.0)))
    await _texts(pool.generate(pb.GenerateRequest(request_id="r", model="m", prompt="x" * 600)))
    assert policy.routes[0].prefix == ()


async def test_each_model_routes_by_its_own_policy() -> None:
    neurons = [FakeNeuron(f"per-model-{i}:1", models=["m", "n"]) for i in range(3)]
    table = PolicyTable("least_outstanding", {"m": "prefix_affinity"})
    pool = await _polled(_timed_pool(neurons, table, Clock(1.0)))
    chat = [pb.ChatMessage(role="system", content="The same system prompt every time.")]
    for model in ("m", "n"):
        for _ in range(6):
            await _texts(pool.generate(pb.GenerateRequest(model=model, messages=chat)))
    by_model = [[sum(r.model == m for r in n.generate_requests) for n in neurons] for m in "mn"]
    assert sorted(by_model[0]) == [0, 0, 6]  # affinity: one home for the prompt
    assert by_model[1] == [2, 2, 2]  # least outstanding: in turn


async def test_a_responses_chain_returns_to_its_neuron_through_the_pool() -> None:
    neurons = [FakeNeuron(f"chain-{i}:1") for i in range(4)]
    pool = await _polled(_timed_pool(neurons, PolicyTable("prefix_affinity"), Clock(1.0)))

    def turn(request_id: str, content: str) -> pb.GenerateRequest:
        message = pb.ChatMessage(role="user", content=content)
        return pb.GenerateRequest(request_id=request_id, model="m", messages=[message])

    await _texts(pool.generate(turn("resp_1", "first turn")))
    (served,) = [n for n in neurons if n.generate_requests]
    # Follow-ups whose prompts share nothing with the first: only the chain
    # links them to its neuron.
    for i in range(2, 8):
        hints = RouteHints(previous_response_id="resp_1")
        await _texts(pool.generate(turn(f"resp_{i}", f"unrelated {i}" * i), hints=hints))
    assert len(served.generate_requests) == 7


def _decisions(address: str, policy: str, decision: str) -> float | None:
    labels = {"model": "m", "replica": address, "policy": policy, "decision": decision}
    return REGISTRY.get_sample_value("neuraxis_routing_policy_decisions_total", labels)


async def test_each_dispatch_counts_the_policys_kind_of_decision_per_replica() -> None:
    neurons = [FakeNeuron(f"decide-{i}:1") for i in range(2)]
    pool = await _polled(_timed_pool(neurons, PolicyTable("prefix_affinity"), Clock(1.0)))
    # Exported at 0 for every kind the policy makes, before any request.
    for n in neurons:
        for kind in ("chain", "prefix", "home", "overflow", "fallback"):
            assert _decisions(n.address, "prefix_affinity", kind) == 0.0
    chat = [pb.ChatMessage(role="system", content="A prompt counted by its decisions.")]
    for _ in range(3):
        await _texts(pool.generate(pb.GenerateRequest(model="m", messages=chat)))
    (home,) = [n for n in neurons if n.generate_requests]
    assert _decisions(home.address, "prefix_affinity", "home") == 1.0
    assert _decisions(home.address, "prefix_affinity", "prefix") == 2.0


async def test_a_load_only_policy_counts_balanced_decisions() -> None:
    neurons = [FakeNeuron(f"balanced-{i}:1") for i in range(2)]
    pool = await _polled(_timed_pool(neurons, PolicyTable("least_outstanding"), Clock(1.0)))
    for _ in range(4):
        await _texts(pool.generate(_request()))
    counts = [_decisions(n.address, "least_outstanding", "balanced") for n in neurons]
    assert counts == [2.0, 2.0]
