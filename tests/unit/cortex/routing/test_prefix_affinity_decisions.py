"""The kind of each prefix-affinity decision (a metrics label): home,
prefix hit, chain, overflow, fallback."""

from __future__ import annotations

from cortex.routing.policy import (
    Candidate,
    Decision,
    Outcome,
)
from cortex.routing.prefix_affinity import PrefixAffinity
from tests.unit.cortex.routing.affinity import (
    ADDRESSES,
    HASHER,
    chat_request,
    decision_of,
    idle_candidates,
    make_route,
    ring_order,
    with_change,
)


def test_a_new_prefix_is_a_home_decision_and_its_repeat_a_prefix_hit() -> None:
    policy = PrefixAffinity(hasher=HASHER)
    prefix = HASHER.blocks(chat_request("Decisions: a prompt seen twice."))
    home = ring_order(prefix)[0]
    assert decision_of(policy, idle_candidates(), make_route(prefix)) == (home, Decision.HOME)
    policy.on_dispatch(Candidate(address=home, outstanding=0), make_route(prefix))
    assert decision_of(policy, idle_candidates(), make_route(prefix)) == (home, Decision.PREFIX)


def test_a_continued_chain_is_a_chain_decision() -> None:
    policy = PrefixAffinity(hasher=HASHER)
    served = ring_order(HASHER.blocks(chat_request("Decisions: a chain.")))[-1]
    policy.on_complete(served, make_route(request_id="resp_d"), Outcome.OK)
    follow = HASHER.blocks(chat_request("Decisions: unrelated follow-up."))
    assert decision_of(policy, idle_candidates(), make_route(follow, previous="resp_d")) == (
        served,
        Decision.CHAIN,
    )


def test_a_home_over_the_bound_is_an_overflow_decision() -> None:
    policy = PrefixAffinity(epsilon=0.25, hasher=HASHER)
    prefix = HASHER.blocks(chat_request("Decisions: an overloaded home."))
    ring = ring_order(prefix)
    full_home = with_change(idle_candidates(), ring[0], outstanding=3)
    assert decision_of(policy, full_home, make_route(prefix)) == (ring[1], Decision.OVERFLOW)


def test_a_chain_over_the_bound_is_an_overflow_and_a_gone_one_is_not() -> None:
    policy = PrefixAffinity(epsilon=0.25, hasher=HASHER)
    prefix = HASHER.blocks(chat_request("Decisions: a chain whose neuron is busy or gone."))
    ring = ring_order(prefix)
    policy.on_complete(ring[-1], make_route(prefix, request_id="resp_o"), Outcome.OK)
    follow = make_route(prefix, previous="resp_o")
    over = with_change(idle_candidates(), ring[-1], outstanding=3)
    assert decision_of(policy, over, follow) == (ring[0], Decision.OVERFLOW)
    gone = idle_candidates([a for a in ADDRESSES if a != ring[-1]])
    assert decision_of(policy, gone, follow) == (ring[0], Decision.HOME)


def test_a_request_without_a_prefix_is_a_fallback_decision() -> None:
    policy = PrefixAffinity(hasher=HASHER)
    candidates = with_change(idle_candidates(), ADDRESSES[0], outstanding=1)
    address, decision = decision_of(policy, candidates, make_route())
    assert decision is Decision.FALLBACK
    assert address != ADDRESSES[0]


def test_select_is_the_candidate_choose_picks() -> None:
    prefix = HASHER.blocks(chat_request("Decisions: select and choose agree."))
    candidates = with_change(idle_candidates(), ring_order(prefix)[0], outstanding=3)
    chosen = PrefixAffinity(hasher=HASHER).select(candidates, make_route(prefix))
    assert chosen is PrefixAffinity(hasher=HASHER).choose(candidates, make_route(prefix)).candidate
