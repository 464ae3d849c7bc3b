"""The prefix-affinity policy on plain candidates: the same prefix goes to the
same neuron, the load bound holds, the ring walks on when the home is full,
only fresh engine load counts, a Responses chain stays on its neuron. The
kind of each decision is test_prefix_affinity_decisions.py's, overflow and
hot prefixes test_prefix_affinity_overflow.py's (their helpers: affinity.py)."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import replace

import pytest

from cortex.routing.policy import Candidate, EngineLoad, Outcome
from cortex.routing.prefix_affinity import PrefixAffinity, bound
from tests.unit.cortex.routing import affinity


def test_the_same_prefix_goes_to_the_same_neuron() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    prefix = affinity.HASHER.blocks(affinity.chat("You are a helpful assistant.", "hello"))
    chosen = {affinity.dispatch(policy, affinity.idle(), affinity.route(prefix)) for _ in range(10)}
    assert chosen == {affinity.ring(prefix)[0]}


def test_a_fresh_policy_agrees_on_the_home_of_a_prefix() -> None:
    # Another cortex process, which has routed nothing, picks the same neuron.
    prefix = affinity.HASHER.blocks(affinity.chat("You are a terse assistant.", "hi"))
    first = PrefixAffinity(hasher=affinity.HASHER).select(affinity.idle(), affinity.route(prefix))
    second = PrefixAffinity(hasher=affinity.HASHER).select(affinity.idle(), affinity.route(prefix))
    assert first.address == second.address == affinity.ring(prefix)[0]


def test_distinct_prefixes_spread_over_the_neurons() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    homes = Counter(
        affinity.dispatch(
            policy,
            affinity.idle(),
            affinity.route(
                affinity.HASHER.blocks(affinity.chat(f"{i:04d} is this system prompt", "q"))
            ),
        )
        for i in range(200)
    )
    # The homes bound: within one of even (the ring alone gave 40-60).
    assert set(homes) == set(affinity.ADDRESSES)
    assert max(homes.values()) - min(homes.values()) <= 1


def test_groups_on_two_neurons_split_evenly_where_the_ring_alone_did_not() -> None:
    two = affinity.ADDRESSES[:2]
    prefixes = [
        affinity.HASHER.blocks(affinity.chat(f"{g:02d}: group, a distinct system prompt.", "q"))
        for g in range(16)
    ]
    by_ring = Counter(affinity.ring(p, two)[0] for p in prefixes)
    assert max(by_ring.values()) >= 10  # the lopsided case this guards against
    policy = PrefixAffinity(hasher=affinity.HASHER)
    turns = [
        {
            p: affinity.in_turn(policy, affinity.idle(two), affinity.route(p, request_id=f"{turn}"))
            for p in prefixes
        }
        for turn in range(3)
    ]
    assert sorted(Counter(turns[0].values()).values()) == [8, 8]
    # Every group comes back to the neuron it was homed on.
    assert turns[1] == turns[2] == turns[0]


def test_a_new_prefix_goes_to_its_ring_home_while_that_holds_no_more_than_its_share() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    prefix = affinity.HASHER.blocks(affinity.chat("A late prefix, homed by the ring."))
    home, other = affinity.ring(prefix)[0], affinity.ring(prefix)[1]
    for g in range(3):  # one prefix on each neuron but the home: it is under its share
        placed = [a for a in affinity.ADDRESSES if a != home][g]
        policy.on_dispatch(Candidate(address=placed, outstanding=0), affinity.route((g, 100 + g)))
    assert policy.select(affinity.idle(), affinity.route(prefix)).address == home
    crowded = PrefixAffinity(hasher=affinity.HASHER)
    for g in range(2):  # two on the home, none elsewhere: the walk goes on
        crowded.on_dispatch(Candidate(address=home, outstanding=0), affinity.route((g, 200 + g)))
    assert crowded.select(affinity.idle(), affinity.route(prefix)).address == other


def test_a_later_turn_follows_the_neuron_that_holds_the_longer_prefix() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    system = "You are a helpful assistant who answers in French."
    first = affinity.HASHER.blocks(affinity.chat(system, "What is the capital of Italy, please?"))
    home = affinity.ring(first)[0]
    other = next(a for a in affinity.ADDRESSES if a != home)
    # The first turn went elsewhere (its home was busy when it came).
    busy = affinity.changed(affinity.idle(), home, outstanding=3)
    route = affinity.route(first)
    assert policy.select(busy, route).address != home
    went = affinity.dispatch(policy, affinity.changed(busy, other, outstanding=0), route)
    later = affinity.HASHER.blocks(
        affinity.chat(system, "What is the capital of Italy, please?", "And of Spain, then?")
    )
    assert later[: len(first)] == first
    assert affinity.dispatch(policy, affinity.idle(), affinity.route(later)) == went


def test_bounded_load_is_never_exceeded() -> None:
    rng = random.Random(7)
    policy = PrefixAffinity(epsilon=0.25, hasher=affinity.HASHER, load_max_age_s=2.0)
    prefixes = [affinity.HASHER.blocks(affinity.chat(f"group {g}", "question")) for g in range(3)]
    for i in range(2000):
        n = rng.randint(1, 6)
        candidates = [
            Candidate(
                address=f"b-{j}:1",
                outstanding=rng.randint(0, 20),
                load=EngineLoad(
                    running=rng.randint(0, 20),
                    waiting=rng.randint(0, 5),
                    measured_at=rng.choice([99.0, 90.0]),
                    kv_cache_usage=rng.choice([None, 0.3, 0.95]),
                ),
            )
            for j in range(n)
        ]
        previous = rng.choice([None, f"r{i - 1}"])  # chains prefer their neuron
        route = affinity.route(
            rng.choice(prefixes), request_id=f"r{i}", now=100.0, previous=previous
        )
        chosen = policy.select(candidates, route)
        policy.on_dispatch(chosen, route)
        policy.on_complete(chosen.address, route, Outcome.OK)
        loads = [
            max(c.outstanding, c.load.running + c.load.waiting)
            if c.load is not None and c.load.measured_at == 99.0
            else c.outstanding
            for c in candidates
        ]
        mine = loads[candidates.index(chosen)]
        limit = math.ceil(1.25 * (sum(loads) + 1) / n)
        assert mine + 1 <= limit, (i, loads, chosen.address)


def test_the_bound_is_the_ceiling_of_one_plus_epsilon_times_the_average() -> None:
    assert bound([0, 0, 0, 0], 0.25) == 1
    assert bound([3, 3, 3, 3], 0.25) == 5  # 1.25 * 13 / 4 = 4.06
    assert bound([8, 0], 0.0) == 5


def test_an_overloaded_home_sends_the_walk_to_the_next_neuron_on_the_ring() -> None:
    policy = PrefixAffinity(epsilon=0.25, hasher=affinity.HASHER)
    prefix = affinity.HASHER.blocks(affinity.chat("A system prompt shared by many requests."))
    ring = affinity.ring(prefix)
    # Home at 3, the rest idle: bound = ceil(1.25 * 4 / 4) = 2, home is over it.
    full_home = affinity.changed(affinity.idle(), ring[0], outstanding=3)
    assert policy.select(full_home, affinity.route(prefix)).address == ring[1]
    # The next one over the bound too: the walk goes on to the third.
    both = affinity.changed(
        affinity.changed(affinity.idle(), ring[0], outstanding=3), ring[1], outstanding=3
    )
    assert policy.select(both, affinity.route(prefix)).address == ring[2]


def test_a_fresh_engine_load_counts_and_a_stale_one_is_ignored() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER, load_max_age_s=2.0)
    prefix = affinity.HASHER.blocks(affinity.chat("Engine load decides this one."))
    home, second = affinity.ring(prefix)[:2]
    # Other cortex processes keep the home's engine busy: 6 running.
    for measured_at, expected in ((99.0, second), (97.0, home)):
        busy = EngineLoad(running=6, waiting=0, measured_at=measured_at)
        candidates = affinity.changed(affinity.idle(), home, load=busy)
        assert policy.select(candidates, affinity.route(prefix, now=100.0)).address == expected


def test_a_saturated_kv_cache_is_passed_over_while_another_is_not() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER, load_max_age_s=2.0, kv_limit=0.8)
    prefix = affinity.HASHER.blocks(affinity.chat("KV pressure decides this one."))
    ring = affinity.ring(prefix)

    def full(measured_at: float = 99.5) -> EngineLoad:
        return EngineLoad(running=0, waiting=0, measured_at=measured_at, kv_cache_usage=0.9)

    assert (
        policy.select(
            affinity.changed(affinity.idle(), ring[0], load=full()), affinity.route(prefix)
        ).address
        == ring[1]
    )
    stale = affinity.changed(affinity.idle(), ring[0], load=full(measured_at=95.0))
    assert policy.select(stale, affinity.route(prefix)).address == ring[0]
    every = [replace(c, load=full()) for c in affinity.idle()]
    assert policy.select(every, affinity.route(prefix)).address == ring[0]


def test_a_chain_goes_back_to_the_neuron_that_served_the_previous_response() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    first = affinity.HASHER.blocks(affinity.chat("Chain system prompt."))
    served = affinity.ring(first)[-1]  # not where a new request with this prefix would go
    policy.on_complete(served, affinity.route(first, request_id="resp_1"), Outcome.OK)
    # A follow-up with different content (Responses do not carry instructions
    # over), so only the chain links it to its neuron.
    follow = affinity.HASHER.blocks(affinity.chat("Something unrelated entirely."))
    assert (
        policy.select(affinity.idle(), affinity.route(follow, previous="resp_1")).address == served
    )


def test_a_failed_response_does_not_pin_a_chain() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    prefix = affinity.HASHER.blocks(affinity.chat("Failed chain prompt."))
    policy.on_complete(
        affinity.ring(prefix)[-1], affinity.route(prefix, request_id="resp_f"), Outcome.FAILED
    )
    assert (
        policy.select(affinity.idle(), affinity.route(prefix, previous="resp_f")).address
        == affinity.ring(prefix)[0]
    )


def test_a_chain_falls_back_when_its_neuron_is_gone_or_over_the_bound() -> None:
    policy = PrefixAffinity(epsilon=0.25, hasher=affinity.HASHER)
    prefix = affinity.HASHER.blocks(affinity.chat("Fallback chain prompt."))
    ring = affinity.ring(prefix)
    served = ring[-1]
    policy.on_complete(served, affinity.route(prefix, request_id="resp_2"), Outcome.OK)
    follow = affinity.route(prefix, previous="resp_2")
    without = affinity.idle([a for a in affinity.ADDRESSES if a != served])
    assert policy.select(without, follow).address == ring[0]
    over = affinity.changed(affinity.idle(), served, outstanding=3)
    assert policy.select(over, follow).address == ring[0]


def test_a_request_without_a_prefix_goes_to_the_least_loaded() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    candidates = [Candidate(address=a, outstanding=i + 1) for i, a in enumerate(affinity.ADDRESSES)]
    candidates = affinity.changed(candidates, affinity.ADDRESSES[2], outstanding=0)
    assert policy.select(candidates, affinity.route()).address == affinity.ADDRESSES[2]


def test_remembered_chains_are_bounded_the_oldest_forgotten() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER, max_chains=2)
    prefix = affinity.HASHER.blocks(affinity.chat("Bounded chain prompt."))
    home, served = affinity.ring(prefix)[0], affinity.ring(prefix)[-1]
    for i in range(3):
        policy.on_complete(served, affinity.route(prefix, request_id=f"resp_{i}"), Outcome.OK)
    assert (
        policy.select(affinity.idle(), affinity.route(prefix, previous="resp_2")).address == served
    )
    assert policy.select(affinity.idle(), affinity.route(prefix, previous="resp_0")).address == home


def test_remembered_prefixes_are_bounded_the_oldest_forgotten() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER, max_prefixes=2)
    prefix = affinity.HASHER.blocks(affinity.chat("Bounded prefix prompt."))
    home, elsewhere = affinity.ring(prefix)[0], affinity.ring(prefix)[-1]
    policy.on_dispatch(Candidate(address=elsewhere, outstanding=0), affinity.route(prefix))
    assert policy.select(affinity.idle(), affinity.route(prefix)).address == elsewhere
    for other in ((1, 2), (3, 4)):  # two newer prefixes push it out
        policy.on_dispatch(Candidate(address=elsewhere, outstanding=0), affinity.route(other))
    # A new prefix again: its ring home, which holds no more than its share.
    assert policy.select(affinity.idle(), affinity.route(prefix)).address == home


def test_a_negative_epsilon_is_refused() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        PrefixAffinity(epsilon=-0.1)
