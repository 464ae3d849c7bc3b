"""Which replicas a request for a LoRA adapter may go to: holders within
the load bound; else replicas with a free adapter slot; else any within it."""

from __future__ import annotations

from cortex.routing.adapter_affinity import AdapterAffinity, Holding, dispatched
from cortex.routing.policy import Candidate

HOLDS = Holding(holds=True, room=False)
ROOM = Holding(holds=False, room=True)
FULL = Holding(holds=False, room=False)


def _narrow(outstanding: list[int], holding: list[Holding], epsilon: float = 0.5) -> list[int]:
    candidates = [Candidate(f"n{i}", n) for i, n in enumerate(outstanding)]
    return AdapterAffinity(epsilon=epsilon).narrow(candidates, holding, now=0.0)


def test_a_holder_within_the_bound_is_a_hit() -> None:
    assert _narrow([0, 0, 0], [FULL, HOLDS, ROOM]) == [1]


def test_several_holders_are_left_to_the_policy() -> None:
    assert _narrow([0, 0, 0], [HOLDS, HOLDS, ROOM]) == [0, 1]


def test_none_holding_it_loads_where_there_is_room() -> None:
    assert _narrow([0, 0, 0], [FULL, ROOM, ROOM]) == [1, 2]


def test_no_room_anywhere_leaves_every_replica_within_the_bound() -> None:
    assert _narrow([0, 0], [FULL, FULL]) == [0, 1]


def test_a_hot_adapter_spreads_past_its_holder_over_the_bound() -> None:
    # Bound: ceil(1.5 * (3 + 1) / 2) = 3: the holder at 3 would take a 4th.
    assert _narrow([3, 0], [HOLDS, ROOM]) == [1]
    # ceil(1.5 * (2 + 1) / 2) = 3: within the bound it keeps the requests.
    assert _narrow([2, 0], [HOLDS, ROOM]) == [0]


def test_a_replica_over_the_bound_is_never_offered() -> None:
    # Bound with epsilon 0: ceil((8 + 1) / 2) = 5; the replica at 8 is over it.
    assert _narrow([8, 0], [ROOM, FULL], epsilon=0.0) == [1]


def test_a_dispatch_plays_the_engines_lru_forward() -> None:
    assert dispatched(("a", "b"), "c", 2, frozenset()) == ("b", "c")  # a evicted
    assert dispatched(("a", "b"), "a", 2, frozenset()) == ("b", "a")  # a used last
    assert dispatched(("a", "b"), "c", 2, frozenset({"a"})) == ("a", "c")  # a busy: b goes
    # Every one busy: the engine waits, evicting nothing yet.
    assert dispatched(("a", "b"), "c", 2, frozenset({"a", "b"})) == ("a", "b", "c")
