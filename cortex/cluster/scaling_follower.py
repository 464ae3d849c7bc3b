"""What cortex does with the controller's answer to its report
(`ScalingView`): the autoscaling metrics it exports, and how long a request
for a model scaled to zero may wait for its wake."""

from __future__ import annotations

from cortex import metrics
from cortex.cluster.status import ScalingView
from cortex.routing.pool import NeuronPool

# With no wake_timeout_s set: this multiple of the model's measured load
# time (placement to SERVING), and at least WAKE_FLOOR_S.
WAKE_LOAD_MULTIPLE = 2.0
WAKE_FLOOR_S = 60.0


def wake_timeout(load_s: float | None, fixed: float | None, start_timeout_s: float) -> float:
    """How long a woken model's requests wait: the setting when given, else
    sized to the model's last measured load, else (never loaded yet) the
    controller's replica start timeout."""
    if fixed is not None:
        return fixed
    if load_s is None:
        return start_timeout_s
    return max(load_s * WAKE_LOAD_MULTIPLE, WAKE_FLOOR_S)


class ScalingFollower:
    def __init__(self, pool: NeuronPool, fixed_timeout_s: float | None, start_timeout_s: float):
        self._pool = pool
        self._fixed = fixed_timeout_s
        self._start_timeout = start_timeout_s
        self._decisions: dict[str, int] = {}
        pool.wake_timeout_s = wake_timeout(None, fixed_timeout_s, start_timeout_s)

    def apply(self, view: ScalingView) -> None:
        for model in self._pool.wakes.wakeable:
            load = view.load_s.get(model)
            self._pool.wake_timeouts[model] = wake_timeout(load, self._fixed, self._start_timeout)
        for model, desired in view.desired.items():
            metrics.set_autoscale_desired(model, desired)
        for key, count in view.decisions.items():
            # A new controller counts from zero again: its count is all new.
            seen = self._decisions.get(key, 0)
            new = count - seen if count >= seen else count
            if new:
                model, direction, reason = key.split("/", 2)
                metrics.record_autoscale_decisions(model, direction, reason, new)
        self._decisions = dict(view.decisions)
