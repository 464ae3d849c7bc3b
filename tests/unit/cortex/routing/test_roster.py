"""The roster with in-memory neurons: what it knows of each neuron from
their Info polls, the caps and free slots admission waits on, and
retirement. Routing through it is test_pool.py's."""

from __future__ import annotations

from collections.abc import Sequence

from cortex.routing.admission import AdmissionOptions
from cortex.routing.least_outstanding import LeastOutstanding
from cortex.routing.pool_settings import PoolSettings
from cortex.routing.roster import Roster
from tests.unit.cortex.routing.fakes import FakeNeuron, Fleet


def _roster(
    neurons: Sequence[FakeNeuron],
    *,
    fleet: Fleet | None = None,
    cap: int = 0,
    refreshed: list[bool] | None = None,
) -> Roster:
    seen = refreshed if refreshed is not None else []
    return Roster(
        neurons,
        ["m"],
        client_factory=fleet or Fleet(),
        policy_for=lambda _model: LeastOutstanding(),
        clock=lambda: 100.0,
        admission=AdmissionOptions(replica_max_concurrency=cap),
        on_refresh=lambda: seen.append(True),
        settings=PoolSettings(poll_interval_s=60.0, load_interval_s=60.0),
    )


async def test_a_poll_learns_which_neurons_are_ready_and_what_they_serve() -> None:
    chat, other, loading = FakeNeuron("r-a:1"), FakeNeuron("r-b:1", ["x"]), FakeNeuron("r-c:1")
    loading.ready = False
    refreshed: list[bool] = []
    roster = _roster([chat, other, loading], refreshed=refreshed)
    assert roster.loading() and roster.ready("m") == []
    await roster.refresh()
    assert refreshed == [True]  # admission is told replicas may have come
    assert [s.address for s in roster.ready("m")] == ["r-a:1"]
    assert sorted(roster.served_models()) == ["m", "x"]
    assert not roster.loading()
    assert roster.known("x") and roster.known("m") and not roster.known("made-up")
    assert roster.model_label("made-up") == "unknown"


async def test_free_slots_add_up_the_caps_of_ready_replicas_or_none_without_a_cap() -> None:
    a, b = FakeNeuron("slots-a:1"), FakeNeuron("slots-b:1")
    roster = _roster([a, b], cap=2)
    await roster.refresh()
    roster.states[0].outstanding = 2
    assert roster.free_slots("m") == 2
    assert not roster.below_cap(roster.states[0]) and roster.below_cap(roster.states[1])
    uncapped = _roster([FakeNeuron("slots-c:1")])
    await uncapped.refresh()
    assert uncapped.free_slots("m") is None  # the fake reports no batch size
    assert roster.free_slots("nobody-serves-this") is None


async def test_a_neuron_that_leaves_the_table_is_closed_once_idle() -> None:
    fleet = Fleet()
    roster = _roster([], fleet=fleet)
    await roster.update(["ret-a:1", "ret-b:1"])
    assert [s.address for s in roster.ready("m")] == ["ret-a:1", "ret-b:1"]
    busy = roster.states[1]
    busy.outstanding = 1
    await roster.update(["ret-a:1"])
    assert [s.address for s in roster.states] == ["ret-a:1"]
    assert not fleet.neurons["ret-b:1"].closed  # a request still runs there
    busy.outstanding = 0
    await roster.close_if_idle(busy)
    assert fleet.neurons["ret-b:1"].closed
    assert roster.in_flight() == {"ret-a:1": 0}
