"""The power-of-two-choices policy: of two random candidates, the less loaded
(this cortex's count, or the engine's when fresh and larger)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from cortex.routing.policy import Candidate, EngineLoad, RouteRequest
from cortex.routing.power_of_two import PowerOfTwo

NOW = 100.0


def _route() -> RouteRequest:
    return RouteRequest(model="m", request_id="req", now=NOW)


def test_of_two_candidates_the_less_loaded_always_wins() -> None:
    policy = PowerOfTwo(rng=random.Random(1))
    candidates = [Candidate("p2-a:1", outstanding=5), Candidate("p2-b:1", outstanding=1)]
    assert {policy.select(candidates, _route()).address for _ in range(20)} == {"p2-b:1"}


def test_the_most_loaded_of_many_is_never_chosen_and_the_rest_share() -> None:
    policy = PowerOfTwo(rng=random.Random(2))
    candidates = [Candidate(f"p2-{i}:1", outstanding=0) for i in range(3)]
    candidates.append(Candidate("p2-busy:1", outstanding=9))
    chosen = Counter(policy.select(candidates, _route()).address for _ in range(300))
    assert "p2-busy:1" not in chosen
    assert set(chosen) == {f"p2-{i}:1" for i in range(3)}


def test_a_fresh_engine_load_counts_and_a_stale_one_is_ignored() -> None:
    quiet = Candidate("p2-quiet:1", outstanding=2)

    def engine_busy(measured_at: float) -> Candidate:
        # This cortex has nothing there, but other senders keep it busy.
        load = EngineLoad(running=7, waiting=3, measured_at=measured_at)
        return Candidate("p2-shared:1", outstanding=0, load=load)

    policy = PowerOfTwo(load_max_age_s=2.0, rng=random.Random(3))
    fresh = [engine_busy(NOW - 1.0), quiet]
    stale = [engine_busy(NOW - 3.0), quiet]
    assert {policy.select(fresh, _route()).address for _ in range(10)} == {"p2-quiet:1"}
    assert {policy.select(stale, _route()).address for _ in range(10)} == {"p2-shared:1"}


def test_the_same_seed_gives_the_same_choices() -> None:
    candidates = [Candidate(f"p2-seed-{i}:1", outstanding=0) for i in range(8)]
    first, second = PowerOfTwo(rng=random.Random(42)), PowerOfTwo(rng=random.Random(42))
    runs = [
        [first.select(candidates, _route()).address for _ in range(20)],
        [second.select(candidates, _route()).address for _ in range(20)],
    ]
    assert runs[0] == runs[1]
    assert len(set(runs[0])) > 1  # ties are broken at random, not always the first


def test_one_candidate_is_chosen_and_none_is_refused() -> None:
    policy = PowerOfTwo()
    only = Candidate("p2-only:1", outstanding=3)
    assert policy.select([only], _route()) is only
    with pytest.raises(ValueError):
        policy.select([], _route())


def test_a_saturated_kv_cache_loses_to_a_busier_neuron_that_is_not() -> None:
    full = EngineLoad(running=1, waiting=0, measured_at=NOW - 0.5, kv_cache_usage=0.95)
    stale_full = EngineLoad(running=1, waiting=0, measured_at=NOW - 5.0, kv_cache_usage=0.95)
    busier = Candidate("p2-busier:1", outstanding=4)
    policy = PowerOfTwo(load_max_age_s=2.0, kv_limit=0.8, rng=random.Random(4))
    saturated = [Candidate("p2-full:1", outstanding=1, load=full), busier]
    assert {policy.select(saturated, _route()).address for _ in range(10)} == {"p2-busier:1"}
    stale = [Candidate("p2-full:1", outstanding=1, load=stale_full), busier]
    assert {policy.select(stale, _route()).address for _ in range(10)} == {"p2-full:1"}
