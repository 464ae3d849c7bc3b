"""Routing policies built by name."""

from __future__ import annotations

import pytest

from cortex.routing.factory import DEFAULT_POLICY, PolicyName, make_policy
from cortex.routing.least_outstanding import LeastOutstanding


def test_least_outstanding_is_built_by_name_and_is_the_default() -> None:
    assert isinstance(make_policy("least_outstanding"), LeastOutstanding)
    assert isinstance(make_policy(), LeastOutstanding)
    assert DEFAULT_POLICY == PolicyName.LEAST_OUTSTANDING


def test_each_policy_gets_its_own_state() -> None:
    assert make_policy(PolicyName.LEAST_OUTSTANDING) is not make_policy(
        PolicyName.LEAST_OUTSTANDING
    )


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="'round_robin'; known: least_outstanding"):
        make_policy("round_robin")
