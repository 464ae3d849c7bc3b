"""Which replicas a request for a LoRA adapter may go to: holders within
the load bound; else, within it, replicas with a free adapter slot, then
the one whose adapter to evict is asked for least; what the roster makes
of the engine's reports."""

from __future__ import annotations

from cortex.routing.adapter_affinity import (
    AdapterAffinity,
    AdapterRates,
    Holding,
    dispatched,
    reported,
    victim,
)
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


def _full(victim: str | None) -> Holding:
    return Holding(holds=False, room=False, victim=victim)


def _popular(**requests: int) -> AdapterAffinity:
    affinity = AdapterAffinity()
    for adapter, n in requests.items():
        for _ in range(n):
            affinity.requested(adapter, now=0.0)
    return affinity


def test_a_miss_evicts_the_adapter_asked_for_least() -> None:
    affinity = _popular(hot=10, cold=1)
    candidates = [Candidate("n0", 0), Candidate("n1", 0)]
    # n0 would evict the hot adapter (its least recently used), n1 the cold one.
    assert affinity.narrow(candidates, [_full("hot"), _full("cold")], now=0.0) == [1]
    assert affinity.narrow(candidates, [_full("cold"), _full("hot")], now=0.0) == [0]
    # An adapter never asked for through this cortex is the cheapest victim.
    assert affinity.narrow(candidates, [_full("cold"), _full("unknown")], now=0.0) == [1]


def test_a_free_slot_comes_before_any_victim() -> None:
    affinity = _popular(cold=1)
    candidates = [Candidate("n0", 0), Candidate("n1", 0)]
    assert affinity.narrow(candidates, [_full("unknown"), ROOM], now=0.0) == [1]


def test_a_replica_whose_adapters_are_all_in_use_comes_last() -> None:
    affinity = _popular(hot=10)
    candidates = [Candidate("n0", 0), Candidate("n1", 0)]
    assert affinity.narrow(candidates, [_full(None), _full("hot")], now=0.0) == [1]
    # Equal costs are the policy's to choose between.
    assert affinity.narrow(candidates, [_full(None), _full(None)], now=0.0) == [0, 1]


def test_the_victims_rate_never_sends_a_miss_over_the_load_bound() -> None:
    affinity = _popular(hot=10)
    candidates = [Candidate("n0", 8), Candidate("n1", 0)]
    # n0 would evict nothing anyone asks for, but is over the bound (5).
    assert AdapterAffinity(epsilon=0.0, rates=affinity.rates).narrow(
        candidates, [_full("cold"), _full("hot")], now=0.0
    ) == [1]


def test_rates_fade_with_their_half_life() -> None:
    rates = AdapterRates(half_life_s=10.0)
    for _ in range(4):
        rates.add("old", now=0.0)
    rates.add("new", now=20.0)
    assert rates.rate("old", now=20.0) == 1.0  # 4 halved twice
    assert rates.rate("old", now=30.0) == 0.5
    assert rates.rate("new", now=30.0) == 0.5
    assert rates.rate("never", now=30.0) == 0.0
    rates.add("old", now=30.0)
    assert rates.rate("old", now=30.0) == 1.5


def test_the_victim_is_the_least_recently_used_idle_adapter() -> None:
    assert victim(("a", "b"), frozenset()) == "a"
    assert victim(("a", "b"), frozenset({"a"})) == "b"
    assert victim(("a", "b"), frozenset({"a", "b"})) is None


def test_a_report_keeps_the_adapters_being_loaded_for_requests_in_flight() -> None:
    # The engine reported a and b while c was loading for a request in flight:
    # c is held (a, the least recently used idle one, makes room for it).
    assert reported(("a", "b"), 2, frozenset({"c"})) == ("b", "c")
    # b in use too: still a goes.
    assert reported(("a", "b"), 2, frozenset({"b", "c"})) == ("b", "c")
    # What the report has is taken as it is, order included.
    assert reported(("b", "a"), 2, frozenset({"a"})) == ("b", "a")
    assert reported((), 2, frozenset()) == ()
