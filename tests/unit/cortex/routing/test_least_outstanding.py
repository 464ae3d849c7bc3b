"""The least-outstanding policy, on plain candidate views."""

from __future__ import annotations

import itertools

import pytest

from cortex.routing.least_outstanding import LeastOutstanding
from cortex.routing.policy import Candidate, EngineLoad, RouteHints, RouteRequest

ROUTE = RouteRequest(model="m", request_id="req-1", now=10.0)


def _candidates(*outstanding: int) -> list[Candidate]:
    return [Candidate(address=f"n{i}:1", outstanding=o) for i, o in enumerate(outstanding)]


def test_the_candidate_with_fewest_outstanding_is_chosen() -> None:
    policy = LeastOutstanding()
    candidates = _candidates(3, 1, 2)
    for _ in range(5):
        assert policy.select(candidates, ROUTE) is candidates[1]


def test_ties_are_taken_in_turn() -> None:
    policy = LeastOutstanding()
    candidates = _candidates(0, 0, 0)
    chosen = [policy.select(candidates, ROUTE).address for _ in range(6)]
    assert sorted(chosen) == ["n0:1", "n0:1", "n1:1", "n1:1", "n2:1", "n2:1"]
    assert all(a != b for a, b in itertools.pairwise(chosen))  # never twice running


def test_ties_rotate_only_among_the_least_loaded() -> None:
    policy = LeastOutstanding()
    candidates = _candidates(1, 0, 2, 0)
    chosen = {policy.select(candidates, ROUTE).address for _ in range(8)}
    assert chosen == {"n1:1", "n3:1"}


def test_a_single_candidate_is_chosen_whatever_its_load() -> None:
    (only,) = _candidates(50)
    assert LeastOutstanding().select([only], ROUTE) is only


def test_engine_load_and_hints_do_not_change_the_choice() -> None:
    # This policy counts only this cortex's own requests; engine load and
    # affinity belong to other policies.
    queued = EngineLoad(running=8, waiting=100, measured_at=9.5, kv_cache_usage=0.99)
    crowded_engine = Candidate(address="a:1", outstanding=0, load=queued)
    busier_here = Candidate(address="b:1", outstanding=1, load=None)
    route = RouteRequest(
        model="m", request_id="r", now=10.0, hints=RouteHints(prompt_cache_key="k")
    )
    assert LeastOutstanding().select([busier_here, crowded_engine], route) is crowded_engine


def test_no_candidates_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="at least one candidate"):
        LeastOutstanding().select([], ROUTE)
