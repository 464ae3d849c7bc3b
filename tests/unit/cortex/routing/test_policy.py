"""The routing-policy interface and its views."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from cortex.routing.policy import (
    Candidate,
    EngineLoad,
    Outcome,
    RouteHints,
    RouteRequest,
    RoutingPolicy,
)


class Last(RoutingPolicy):
    """A policy that overrides only `select`."""

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        return candidates[-1]


def test_a_policy_needs_only_select_the_hooks_default_to_nothing() -> None:
    policy = Last()
    candidates = [Candidate("a:1", 0), Candidate("b:1", 0)]
    route = RouteRequest(model="m", request_id="r", now=0.0)
    assert policy.select(candidates, route) is candidates[1]
    policy.on_dispatch(candidates[1], route)
    policy.on_complete("b:1", route, Outcome.OK)


def test_a_policy_without_select_cannot_be_made() -> None:
    class Incomplete(RoutingPolicy):
        pass

    with pytest.raises(TypeError):
        Incomplete()  # type: ignore[abstract]


def test_an_engine_load_is_trusted_only_while_fresh() -> None:
    load = EngineLoad(running=2, waiting=1, measured_at=100.0)
    assert load.age(100.25) == 0.25
    assert load.fresh(now=100.25, max_age_s=0.25)
    assert not load.fresh(now=100.5, max_age_s=0.25)
    assert load.kv_cache_usage is None  # not every engine reports it


def test_a_route_request_starts_as_a_first_attempt_without_hints() -> None:
    route = RouteRequest(model="m", request_id="r", now=1.0)
    assert route.attempt == 0
    assert route.hints == RouteHints(previous_response_id=None, prompt_cache_key=None)


def test_views_are_read_only() -> None:
    candidate = Candidate("a:1", 3)
    with pytest.raises(AttributeError):
        candidate.outstanding = 0  # type: ignore[misc]
