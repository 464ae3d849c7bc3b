"""The kind of each prefix-affinity decision (a metrics label): home,
prefix hit, chain, overflow, fallback."""

from __future__ import annotations

from cortex.routing.policy import Candidate, Decision, Outcome
from cortex.routing.prefix_affinity import PrefixAffinity
from tests.unit.cortex.routing import affinity


def test_a_new_prefix_is_a_home_decision_and_its_repeat_a_prefix_hit() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    prefix = affinity.HASHER.blocks(affinity.chat("Decisions: a prompt seen twice."))
    home = affinity.ring(prefix)[0]
    assert affinity.decision(policy, affinity.idle(), affinity.route(prefix)) == (
        home,
        Decision.HOME,
    )
    policy.on_dispatch(Candidate(address=home, outstanding=0), affinity.route(prefix))
    assert affinity.decision(policy, affinity.idle(), affinity.route(prefix)) == (
        home,
        Decision.PREFIX,
    )


def test_a_continued_chain_is_a_chain_decision() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    served = affinity.ring(affinity.HASHER.blocks(affinity.chat("Decisions: a chain.")))[-1]
    policy.on_complete(served, affinity.route(request_id="resp_d"), Outcome.OK)
    follow = affinity.HASHER.blocks(affinity.chat("Decisions: unrelated follow-up."))
    assert affinity.decision(
        policy, affinity.idle(), affinity.route(follow, previous="resp_d")
    ) == (
        served,
        Decision.CHAIN,
    )


def test_a_home_over_the_bound_is_an_overflow_decision() -> None:
    policy = PrefixAffinity(epsilon=0.25, hasher=affinity.HASHER)
    prefix = affinity.HASHER.blocks(affinity.chat("Decisions: an overloaded home."))
    ring = affinity.ring(prefix)
    full_home = affinity.changed(affinity.idle(), ring[0], outstanding=3)
    assert affinity.decision(policy, full_home, affinity.route(prefix)) == (
        ring[1],
        Decision.OVERFLOW,
    )


def test_a_chain_over_the_bound_is_an_overflow_and_a_gone_one_is_not() -> None:
    policy = PrefixAffinity(epsilon=0.25, hasher=affinity.HASHER)
    prefix = affinity.HASHER.blocks(
        affinity.chat("Decisions: a chain whose neuron is busy or gone.")
    )
    ring = affinity.ring(prefix)
    policy.on_complete(ring[-1], affinity.route(prefix, request_id="resp_o"), Outcome.OK)
    follow = affinity.route(prefix, previous="resp_o")
    over = affinity.changed(affinity.idle(), ring[-1], outstanding=3)
    assert affinity.decision(policy, over, follow) == (ring[0], Decision.OVERFLOW)
    gone = affinity.idle([a for a in affinity.ADDRESSES if a != ring[-1]])
    assert affinity.decision(policy, gone, follow) == (ring[0], Decision.HOME)


def test_a_request_without_a_prefix_is_a_fallback_decision() -> None:
    policy = PrefixAffinity(hasher=affinity.HASHER)
    candidates = affinity.changed(affinity.idle(), affinity.ADDRESSES[0], outstanding=1)
    address, decision = affinity.decision(policy, candidates, affinity.route())
    assert decision is Decision.FALLBACK
    assert address != affinity.ADDRESSES[0]


def test_select_is_the_candidate_choose_picks() -> None:
    prefix = affinity.HASHER.blocks(affinity.chat("Decisions: select and choose agree."))
    candidates = affinity.changed(affinity.idle(), affinity.ring(prefix)[0], outstanding=3)
    chosen = PrefixAffinity(hasher=affinity.HASHER).select(candidates, affinity.route(prefix))
    assert (
        chosen
        is PrefixAffinity(hasher=affinity.HASHER)
        .choose(candidates, affinity.route(prefix))
        .candidate
    )
