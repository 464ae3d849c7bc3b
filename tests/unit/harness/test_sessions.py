"""The shared-prefix multi-turn workload of harness/sessions.py: its shape and
the figures a run reports."""

from __future__ import annotations

import pytest

from harness.sessions import Result, Shape, conversations


def test_each_user_has_its_groups_system_prompt_and_its_own_turns() -> None:
    shape = Shape(groups=3, users_per_group=2, turns=3, system_chars=100, user_chars=20)
    users = conversations(shape, "t")
    assert len(users) == 6
    assert all(len(u) == 4 for u in users)
    systems = [u[0] for u in users]
    assert len(set(systems)) == 3
    assert all(systems.count(s) == 2 for s in systems)
    assert all(len(s) == len("[01234567 group 0] ") + 100 for s in systems)
    assert len({turn for u in users for turn in u[1:]}) == 18


def test_a_tag_changes_every_prefix_but_not_the_shape() -> None:
    shape = Shape(groups=2, users_per_group=2)
    one, two = conversations(shape, "a"), conversations(shape, "b")
    assert not {u[0] for u in one} & {u[0] for u in two}
    assert [len(u[0]) for u in one] == [len(u[0]) for u in two]


def test_users_of_groups_are_interleaved() -> None:
    users = conversations(Shape(groups=8, users_per_group=8), "t", seed=1)
    groups = [u[0] for u in users]
    assert groups != sorted(groups, key=groups.index)  # not group after group


def test_result_figures() -> None:
    result = Result(
        ttfts=[i / 1000 for i in range(1, 101)],
        prompt_tokens=200,
        cached_tokens=150,
        completion_tokens=50,
        wall_s=2.0,
    )
    assert result.ttft_ms(0.5) == pytest.approx(50.5, abs=0.6)
    assert result.ttft_ms(0.9) == pytest.approx(90.0, abs=1.0)
    assert result.hit_rate == 0.75
    assert result.tokens_per_s == 25.0
