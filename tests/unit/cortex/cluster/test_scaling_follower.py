"""What cortex makes of the controller's answer to its reports: the
autoscaling metrics and the wake timeouts."""

from __future__ import annotations

from prometheus_client import REGISTRY

from cortex.cluster.scaling_follower import WAKE_FLOOR_S, ScalingFollower, wake_timeout
from cortex.cluster.status import ScalingView
from tests.unit.cortex.routing.pools import fake_pool


def _value(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_wake_timeout_is_the_setting_or_sized_to_the_measured_load() -> None:
    assert wake_timeout(100.0, 30.0, 900.0) == 30.0
    assert wake_timeout(100.0, None, 900.0) == 200.0
    assert wake_timeout(1.0, None, 900.0) == WAKE_FLOOR_S
    assert wake_timeout(None, None, 900.0) == 900.0


def test_the_answer_sets_the_metrics_and_the_timeouts() -> None:
    pool = fake_pool([])
    pool.wakes.wakeable = frozenset({"zz"})
    follower = ScalingFollower(pool, None, 900.0)
    assert pool.wake_timeout_s == 900.0
    labels = {"model": "zz", "direction": "up", "reason": "wake"}
    before = _value("neuraxis_autoscale_decisions_total", labels)
    follower.apply(ScalingView(desired={"zz": 2}, decisions={"zz/up/wake": 3}, load_s={"zz": 80}))
    follower.apply(ScalingView(desired={"zz": 2}, decisions={"zz/up/wake": 4}, load_s={"zz": 80}))
    assert _value("neuraxis_autoscale_decisions_total", labels) == before + 4
    # A new controller counts from zero: its 1 is one more decision.
    follower.apply(ScalingView(desired={"zz": 1}, decisions={"zz/up/wake": 1}))
    assert _value("neuraxis_autoscale_decisions_total", labels) == before + 5
    assert _value("neuraxis_autoscale_desired_replicas", {"model": "zz"}) == 1
    assert pool.wake_timeouts == {"zz": 900.0}  # that controller measured no load yet
    follower.apply(ScalingView(load_s={"zz": 80}))
    assert pool.wake_timeouts == {"zz": 160.0}
