"""The desired-replicas function over plain data and a hand-moved clock:
ramps, spikes, oscillation, stale reports, clamps, scale to zero."""

from __future__ import annotations

import itertools
from typing import Any

from cortex.cluster.autoscale import (
    DEFAULT_TARGET_IN_FLIGHT,
    Direction,
    Reason,
    ScaleState,
    Signals,
    initial_state,
    signals,
    step,
    target_in_flight,
)
from cortex.cluster.decisions import ReplicaRecord
from cortex.cluster.reports import REPORT_TTL_S, CortexReports
from cortex.cluster.spec import AutoscaleSpec
from cortex.cluster.status import CortexReport, ReplicaState


def table(**fields: Any) -> AutoscaleSpec:
    base: dict[str, Any] = {
        "min_replicas": 1,
        "max_replicas": 6,
        "target_in_flight": 10,
        "scale_up_after_s": 10,
        "scale_down_after_s": 120,
    }
    return AutoscaleSpec.model_validate(base | fields)


def load(n: int) -> Signals:
    return Signals(in_flight=n, reported=True)


def run(
    scale: AutoscaleSpec, state: ScaleState, seen: Signals, start: float, seconds: int
) -> tuple[ScaleState, list[int]]:
    """One pass a second for `seconds` from `start` with the same signals;
    the state and the desired count after each pass."""
    counts = []
    for t in range(seconds):
        state = step(scale, state, seen, start + t)
        counts.append(state.desired)
    return state, counts


def test_a_ramp_scales_up_after_the_delay_and_down_after_the_longer_one() -> None:
    scale = table()
    state, counts = run(scale, ScaleState(1), load(45), 0, 12)
    assert counts[:10] == [1] * 10  # wanted 5 for less than 10 s
    assert counts[10:] == [5, 5]
    assert state.last is not None
    assert (state.last.direction, state.last.reason) == (Direction.UP, Reason.LOAD)
    assert "45 in flight + 0 queued" in state.last.detail
    state, counts = run(scale, state, load(12), 100, 125)
    assert counts[119] == 5 and counts[120] == 2  # down only after 120 s of less
    assert state.last is not None and state.last.direction is Direction.DOWN


def test_queued_requests_count_as_load() -> None:
    state, _ = run(table(), ScaleState(1), Signals(in_flight=10, queued=20, reported=True), 0, 11)
    assert state.desired == 3


def test_a_spike_shorter_than_scale_up_after_s_adds_nothing() -> None:
    scale = table()
    state, counts = run(scale, ScaleState(1), load(60), 0, 9)
    state, after = run(scale, state, load(5), 9, 30)
    assert set(counts + after) == {1}
    assert state.last is None


def test_an_oscillating_load_scales_up_once_and_never_flaps() -> None:
    scale = table()
    state = ScaleState(1)
    history = []
    for cycle in range(10):  # 30 s at 6x, 30 s at 1x, ten times
        state, high = run(scale, state, load(60), cycle * 60, 30)
        state, low = run(scale, state, load(10), cycle * 60 + 30, 30)
        history += high + low
    changes = sum(1 for a, b in itertools.pairwise(history) if a != b)
    assert changes == 1
    assert history[-1] == 6


def test_the_count_stays_within_min_and_max() -> None:
    scale = table(min_replicas=2, max_replicas=3)
    state, _ = run(scale, ScaleState(2), load(500), 0, 20)
    assert state.desired == 3
    state, _ = run(scale, state, load(0), 20, 1000)
    assert state.desired == 2  # never below min, however idle


def test_a_table_changed_under_the_count_moves_it_at_once() -> None:
    state = step(table(max_replicas=2), ScaleState(5), load(50), 0)
    assert state.desired == 2
    assert state.last is not None and state.last.reason is Reason.BOUNDS


def test_scale_to_zero_after_idle_then_a_request_wakes_it_at_once() -> None:
    scale = table(min_replicas=0, scale_to_zero_after_s=300)
    state, counts = run(scale, ScaleState(2), load(15), 0, 5)
    state, counts = run(scale, state, load(0), 5, 400)
    assert counts[119] == 2 and counts[121] == 1  # down to one after 120 s
    assert counts[298] == 1 and counts[299] == 0  # to zero 300 s after the last request (t=4)
    assert state.last is not None and state.last.reason is Reason.IDLE
    woken = step(scale, state, Signals(queued=1, reported=True), 1000)
    assert woken.desired == 1
    assert woken.last is not None
    assert (woken.last.direction, woken.last.reason) == (Direction.UP, Reason.WAKE)


def test_without_any_signal_nothing_moves() -> None:
    scale = table(min_replicas=0, scale_to_zero_after_s=5)
    _state, counts = run(scale, ScaleState(3), Signals(), 0, 1000)
    assert set(counts) == {3}


def test_engine_counts_are_a_signal_when_they_say_more() -> None:
    seen = Signals(in_flight=5, engine=40, reported=True)
    assert seen.load == 40
    state, _ = run(table(), ScaleState(1), seen, 0, 11)
    assert state.desired == 4


def test_the_default_target_is_seventy_percent_of_the_replica_cap() -> None:
    scale = table(target_in_flight=None)
    assert target_in_flight(scale, 10) == 7
    assert target_in_flight(scale, None) == DEFAULT_TARGET_IN_FLIGHT


def test_a_restarted_controller_starts_from_the_replicas_it_adopted() -> None:
    scale = table(min_replicas=1, max_replicas=4)
    assert initial_state(scale, start=1, running=3).desired == 3
    assert initial_state(scale, start=1, running=9).desired == 4
    assert initial_state(scale, start=2, running=0).desired == 2


def record(replica_id: str, address: str, **fields: Any) -> ReplicaRecord:
    return ReplicaRecord(
        replica_id, "chat", 1, 0.0, state=ReplicaState.READY, address=address, **fields
    )


def report(instance: str, in_flight: dict[str, int], **fields: Any) -> CortexReport:
    host, pid = instance.split(":")
    return CortexReport(
        instance=instance,
        host=host,
        pid=int(pid),
        in_flight=in_flight,
        table_version=1,
        **fields,
    )


def test_signals_sum_every_cortex_over_the_models_replicas() -> None:
    replicas = [
        record("chat-1", "a:1", engine_running=4, engine_waiting=1, load_at=9.0),
        record("chat-2", "b:1"),
        ReplicaRecord("other-1", "other", 3, 0.0, address="c:1"),
    ]
    reports = [
        (report("h:1", {"a:1": 3, "c:1": 7}, queued={"chat": 2}, caps={"chat": 16}), 1.0),
        (
            report(
                "h:2", {"b:1": 4}, queued={"other": 9}, caps={"chat": 8}, kv_usage={"chat": 0.4}
            ),
            1.0,
        ),
    ]
    seen = signals("chat", replicas, reports, now=10.0)
    assert seen == Signals(in_flight=7, queued=2, engine=5, cap=16, kv_usage=0.4, reported=True)
    # An engine count older than the TTL is no signal.
    assert signals("chat", replicas, reports, now=100.0).engine is None


def test_a_cortex_whose_reports_stop_drops_out_and_the_count_comes_down() -> None:
    scale = table()
    replicas = [record("chat-1", "a:1")]
    kept = CortexReports()
    state = ScaleState(1)
    for now in range(0, 20):
        kept.add(report("h:1", {"a:1": 30}), float(now))
        kept.add(report("h:2", {"a:1": 30}), float(now))
        state = step(scale, state, signals("chat", replicas, kept.fresh(now), now), now)
    assert state.desired == 6
    # h:2 stops reporting; h:1 carries 10 alone.
    for now in range(20, 200):
        kept.add(report("h:1", {"a:1": 10}), float(now))
        fresh = kept.fresh(now)
        if now > 20 + REPORT_TTL_S:
            assert [r.instance for r, _ in fresh] == ["h:1"]
        state = step(scale, state, signals("chat", replicas, fresh, now), now)
    assert state.desired == 1


def test_a_full_kv_cache_wants_one_more_replica_and_holds_the_count() -> None:
    scale = table()
    full = Signals(in_flight=5, kv_usage=0.95, reported=True)  # few requests, long ones
    state, counts = run(scale, ScaleState(1), full, 0, 11)
    assert counts[-1] == 2
    assert state.last is not None and "KV cache 95% full" in state.last.detail
    state, counts = run(scale, state, full, 11, 11)
    assert counts[-1] == 3  # still full on two: one more again
    # Not full: back down to what the requests want, after the delay.
    state, counts = run(scale, state, Signals(in_flight=5, kv_usage=0.5, reported=True), 22, 121)
    assert counts[-1] == 1
