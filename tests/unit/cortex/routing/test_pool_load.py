"""NeuronPool's inputs to the policies with in-memory neurons: the engine
load polls (fresh or stale), the prefix hashes a policy asks for, one
policy per model, and the decisions counted per replica."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from axon.errors import (
    InternalError,
)
from axon.v1 import neuron_pb2 as pb
from cortex.routing.factory import PolicyOptions, PolicyTable
from cortex.routing.policy import EngineLoad, RouteHints
from cortex.routing.pool import NeuronPool
from cortex.routing.prefix import PrefixHasher
from cortex.routing.roster import IDLE_RECHECK_S
from harness.clock import ManualClock as Clock
from tests.unit.cortex.routing import pools
from tests.unit.cortex.routing.fakes import DONE, FakeNeuron, text


async def _recorded(
    neurons: list[FakeNeuron], now: float
) -> tuple[pools.Recorder, Clock, NeuronPool]:
    """A polled pool of `neurons` at clock time `now`, its policy recording
    what it is shown."""
    policy, clock = pools.Recorder(), Clock(now)
    return policy, clock, await pools.polled(pools.fake_pool(neurons, policy=policy, clock=clock))


async def test_the_engine_load_poll_feeds_the_candidates() -> None:
    a, b = FakeNeuron("load-a:1"), FakeNeuron("load-b:1")
    a.waiting = 4
    policy, clock, pool = await _recorded([a, b], 50.0)
    await pools.texts(pool.generate(pools.request()))
    assert [c.load for c in policy.candidates[0]] == [None, None]  # not polled yet
    await pool.refresh_load()
    clock.now = 51.0
    await pools.texts(pool.generate(pools.request()))
    assert [c.load for c in policy.candidates[1]] == [
        EngineLoad(running=0, waiting=4, measured_at=50.0),
        EngineLoad(running=0, waiting=0, measured_at=50.0),
    ]
    assert policy.routes[1].now == 51.0


async def test_the_kv_cache_usage_reaches_the_candidates_when_reported() -> None:
    a = FakeNeuron("load-kv:1")
    a.kv_cache_usage = 0.625
    policy, _, pool = await _recorded([a], 5.0)
    await pool.refresh_load()
    await pools.texts(pool.generate(pools.request()))
    assert policy.candidates[0][0].load == EngineLoad(
        running=0, waiting=0, measured_at=5.0, kv_cache_usage=0.625
    )


async def test_a_load_report_carries_our_own_count_when_it_came() -> None:
    # What the engine says minus this count is other senders' work
    # (load.effective_load); the count is the one at the report, not later.
    a = FakeNeuron("load-own:1")
    hold = asyncio.Event()
    a.script = [text("x"), hold, DONE]
    policy, _, pool = await _recorded([a], 7.0)
    stream = pool.generate(pools.request())
    await pools.first_message(stream)  # one request of ours in flight
    await pool.refresh_load()
    hold.set()
    await pools.texts(stream)
    await pools.texts(pool.generate(pools.request("m", "req-2")))
    load = policy.candidates[-1][0].load
    assert load is not None and (load.running, load.own) == (1, 1)


async def test_a_stale_engine_load_no_longer_steers_requests() -> None:
    a, b = FakeNeuron("stale-a:1"), FakeNeuron("stale-b:1")
    a.waiting = 5  # other cortex processes keep a's engine busy
    clock = Clock(100.0)
    table = PolicyTable("power_of_two", options=PolicyOptions(load_max_age_s=2.0, seed=5))
    pool = await pools.polled(pools.fake_pool([a, b], policy=table, clock=clock))
    await pool.refresh_load()
    for _ in range(10):
        await pools.texts(pool.generate(pools.request()))
    assert not a.generate_requests
    clock.now = 102.5  # no report since: a's is too old to trust
    for _ in range(20):
        await pools.texts(pool.generate(pools.request()))
    assert a.generate_requests


async def test_the_background_poll_keeps_the_engine_load_current() -> None:
    a = FakeNeuron("load-bg:1")
    policy, clock = pools.Recorder(), Clock(1.0)
    pool = pools.fake_pool([a], policy=policy, clock=clock, load_interval_s=0.01)
    await pool.start()
    try:
        a.waiting = 3
        clock.now = 1.0 + IDLE_RECHECK_S  # the idle report of the start has aged
        deadline = asyncio.get_running_loop().time() + 5.0
        seen = None
        while asyncio.get_running_loop().time() < deadline:
            await pools.texts(pool.generate(pools.request()))
            seen = policy.candidates[-1][0].load
            if seen is not None and seen.waiting == 3:
                break
            await asyncio.sleep(0.01)
        assert seen == EngineLoad(running=0, waiting=3, measured_at=1.0 + IDLE_RECHECK_S)
    finally:
        await pool.stop()


async def test_an_unreachable_neurons_last_load_stays_with_its_time() -> None:
    a = FakeNeuron("load-gone:1")
    a.waiting = 2
    policy, clock, pool = await _recorded([a], 10.0)
    await pool.refresh_load()
    a.reachable = False
    clock.now = 20.0
    await pool.refresh_load()  # fails; the policy judges the old value's age
    a.reachable = True
    await pools.texts(pool.generate(pools.request()))
    assert policy.candidates[0][0].load == EngineLoad(running=0, waiting=2, measured_at=10.0)


async def test_a_prefix_policy_gets_the_hashes_and_a_retry_keeps_them() -> None:
    a, b = FakeNeuron("prefix-a:1"), FakeNeuron("prefix-b:1")
    a.script = [InternalError("boom")]
    hasher = PrefixHasher(block_bytes=16, max_blocks=4)
    policy = pools.Recorder(hasher)
    pool = await pools.polled(pools.fake_pool([a, b], policy=policy, clock=Clock(1.0)))
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
    await pools.texts(pool.generate(request, hints=hints))
    expected = hasher.blocks(request, salt="tenant")
    assert len(expected) == 4
    assert [(r.attempt, r.prefix) for r in policy.routes] == [(0, expected), (1, expected)]


async def test_a_policy_without_a_hasher_gets_no_prefix() -> None:
    policy = pools.Recorder()
    pool = await pools.polled(
        pools.fake_pool([FakeNeuron("prefix-none:1")], policy=policy, clock=Clock(1.0))
    )
    await pools.texts(
        pool.generate(pb.GenerateRequest(request_id="r", model="m", prompt="x" * 600))
    )
    assert policy.routes[0].prefix == ()


async def test_each_model_routes_by_its_own_policy() -> None:
    neurons = [FakeNeuron(f"per-model-{i}:1", models=["m", "n"]) for i in range(3)]
    table = PolicyTable("least_outstanding", {"m": "prefix_affinity"})
    pool = await pools.polled(pools.fake_pool(neurons, policy=table, clock=Clock(1.0)))
    chat = [pb.ChatMessage(role="system", content="The same system prompt every time.")]
    for model in ("m", "n"):
        for _ in range(6):
            await pools.texts(pool.generate(pb.GenerateRequest(model=model, messages=chat)))
    by_model = [[sum(r.model == m for r in n.generate_requests) for n in neurons] for m in "mn"]
    assert sorted(by_model[0]) == [0, 0, 6]  # affinity: one home for the prompt
    assert by_model[1] == [2, 2, 2]  # least outstanding: in turn


async def test_a_responses_chain_returns_to_its_neuron_through_the_pool() -> None:
    neurons = [FakeNeuron(f"chain-{i}:1") for i in range(4)]
    pool = await pools.polled(
        pools.fake_pool(neurons, policy=PolicyTable("prefix_affinity"), clock=Clock(1.0))
    )

    def turn(request_id: str, content: str) -> pb.GenerateRequest:
        message = pb.ChatMessage(role="user", content=content)
        return pb.GenerateRequest(request_id=request_id, model="m", messages=[message])

    await pools.texts(pool.generate(turn("resp_1", "first turn")))
    (served,) = [n for n in neurons if n.generate_requests]
    # Follow-ups whose prompts share nothing with the first: only the chain
    # links them to its neuron.
    for i in range(2, 8):
        hints = RouteHints(previous_response_id="resp_1")
        await pools.texts(pool.generate(turn(f"resp_{i}", f"unrelated {i}" * i), hints=hints))
    assert len(served.generate_requests) == 7


def _decisions(address: str, policy: str, decision: str) -> float | None:
    labels = {"model": "m", "replica": address, "policy": policy, "decision": decision}
    return REGISTRY.get_sample_value("neuraxis_routing_policy_decisions_total", labels)


async def test_each_dispatch_counts_the_policys_kind_of_decision_per_replica() -> None:
    neurons = [FakeNeuron(f"decide-{i}:1") for i in range(2)]
    pool = await pools.polled(
        pools.fake_pool(neurons, policy=PolicyTable("prefix_affinity"), clock=Clock(1.0))
    )
    # Exported at 0 for every kind the policy makes, before any request.
    for n in neurons:
        for kind in ("chain", "prefix", "home", "overflow", "fallback"):
            assert _decisions(n.address, "prefix_affinity", kind) == 0.0
    chat = [pb.ChatMessage(role="system", content="A prompt counted by its decisions.")]
    for _ in range(3):
        await pools.texts(pool.generate(pb.GenerateRequest(model="m", messages=chat)))
    (home,) = [n for n in neurons if n.generate_requests]
    assert _decisions(home.address, "prefix_affinity", "home") == 1.0
    assert _decisions(home.address, "prefix_affinity", "prefix") == 2.0


async def test_a_load_only_policy_counts_balanced_decisions() -> None:
    neurons = [FakeNeuron(f"balanced-{i}:1") for i in range(2)]
    pool = await pools.polled(
        pools.fake_pool(neurons, policy=PolicyTable("least_outstanding"), clock=Clock(1.0))
    )
    for _ in range(4):
        await pools.texts(pool.generate(pools.request()))
    counts = [_decisions(n.address, "least_outstanding", "balanced") for n in neurons]
    assert counts == [2.0, 2.0]


async def test_the_periodic_poll_asks_an_idle_neuron_again_only_once_its_report_ages() -> None:
    idle, busy = FakeNeuron("load-idle:1"), FakeNeuron("load-busy:1")
    busy.waiting = 1
    policy, clock, pool = await _recorded([idle, busy], 10.0)
    await pool.refresh_load()  # both asked: idle reports nothing, busy one waiting
    idle.waiting = busy.waiting = 5
    clock.now = 10.0 + IDLE_RECHECK_S - 0.1
    await pool.poll_load()  # the idle report is fresh: only busy is asked
    await pools.texts(pool.generate(pools.request()))
    assert [c.load.waiting for c in policy.candidates[0] if c.load] == [0, 5]
    clock.now = 10.0 + IDLE_RECHECK_S
    await pool.poll_load()  # it has aged: asked again
    await pools.texts(pool.generate(pools.request()))
    assert [c.load.waiting for c in policy.candidates[1] if c.load] == [5, 5]


async def test_the_periodic_poll_asks_a_neuron_holding_our_request_however_fresh() -> None:
    a = FakeNeuron("load-held:1")
    gate = asyncio.Event()
    a.script = [text("a"), gate, DONE]
    policy, _, pool = await _recorded([a], 10.0)
    await pool.refresh_load()  # idle at 10.0
    stream = pool.generate(pools.request())
    await anext(aiter(stream))  # the request is on the neuron
    a.waiting = 2
    await pool.poll_load()  # same instant, report fresh: asked all the same
    gate.set()
    assert await pools.texts(stream) == ["!"]  # the rest: DONE's text
    await pools.texts(pool.generate(pools.request()))
    held = EngineLoad(running=1, waiting=2, measured_at=10.0, own=1)
    assert policy.candidates[-1][0].load == held
