"""Routing policies built by name."""

from __future__ import annotations

import pytest

from cortex.routing.factory import (
    DEFAULT_POLICY,
    PolicyName,
    PolicyOptions,
    PolicyTable,
    make_policy,
)
from cortex.routing.least_outstanding import LeastOutstanding
from cortex.routing.power_of_two import PowerOfTwo
from cortex.routing.prefix import PrefixHasher
from cortex.routing.prefix_affinity import PrefixAffinity


def test_least_outstanding_is_built_by_name() -> None:
    assert isinstance(make_policy("least_outstanding"), LeastOutstanding)


def test_prefix_affinity_is_the_default() -> None:
    assert isinstance(make_policy(), PrefixAffinity)
    assert DEFAULT_POLICY == PolicyName.PREFIX_AFFINITY


def test_each_policy_gets_its_own_state() -> None:
    assert make_policy(PolicyName.LEAST_OUTSTANDING) is not make_policy(
        PolicyName.LEAST_OUTSTANDING
    )


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(
        ValueError,
        match="'round_robin'; known: least_outstanding, power_of_two, prefix_affinity",
    ):
        make_policy("round_robin")


def test_each_name_builds_its_policy_with_the_options() -> None:
    assert isinstance(make_policy("power_of_two"), PowerOfTwo)
    affinity = make_policy("prefix_affinity", PolicyOptions(block_bytes=64, max_blocks=4))
    assert isinstance(affinity, PrefixAffinity)
    assert affinity.prefix_hasher == PrefixHasher(block_bytes=64, max_blocks=4)
    assert make_policy("least_outstanding").prefix_hasher is None


def test_the_table_gives_each_model_its_own_policy_of_its_kind() -> None:
    table = PolicyTable("power_of_two", {"embedder": "least_outstanding"})
    chat, other = table.for_model("chat"), table.for_model("other-chat")
    assert isinstance(chat, PowerOfTwo)
    assert chat is not other
    assert table.for_model("chat") is chat
    assert isinstance(table.for_model("embedder"), LeastOutstanding)
    assert isinstance(PolicyTable().for_model("any"), PrefixAffinity)


def test_the_table_refuses_an_unknown_name_when_built() -> None:
    with pytest.raises(ValueError, match="'sticky'"):
        PolicyTable("least_outstanding", {"m": "sticky"})


@pytest.mark.parametrize("name", list(PolicyName))
def test_each_policy_carries_its_setting_name(name: PolicyName) -> None:
    # The name is the `policy` label of the decision metric.
    assert make_policy(name).name == name.value
