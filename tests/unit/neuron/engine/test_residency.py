"""The bounded set of adapters an engine holds: which one goes for room."""

from __future__ import annotations

import pytest

from neuron.engine.residency import Residency


def test_room_left_names_no_victim() -> None:
    held = Residency(2)
    held.admit("a")
    assert held.victim() is None and not held.full()


def test_the_least_recently_used_idle_adapter_goes() -> None:
    held = Residency(2)
    held.admit("a")
    held.admit("b")
    held.acquire("a")  # a used last
    held.release("a")
    assert held.victim() == "b"


def test_an_adapter_in_flight_is_never_the_victim() -> None:
    held = Residency(2)
    held.admit("a")
    held.admit("b")
    held.acquire("a")
    held.acquire("b")
    assert held.victim() is None  # every one in use: the caller waits
    held.release("b")
    assert held.victim() == "b"
    with pytest.raises(ValueError, match="in flight"):
        held.evict("a")


def test_admitting_past_capacity_is_refused() -> None:
    held = Residency(1)
    held.admit("a")
    with pytest.raises(ValueError, match="no room"):
        held.admit("b")
    held.evict("a")
    held.admit("b")
    assert held.held() == ["b"]


def test_a_spared_adapter_is_never_the_victim() -> None:
    held = Residency(2)
    held.admit("a")
    held.admit("b")
    assert held.victim(spared={"a"}) == "b"  # a: requests about to start on it
    assert held.victim(spared={"a", "b"}) is None
