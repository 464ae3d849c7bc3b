"""How many replicas an autoscaled model wants: pure functions over plain data.

`signals` sums what the controller knows of a model's load: the requests
every cortex instance that reported within REPORT_TTL_S has in flight on its
replicas and waiting in its admission queue (a cortex whose reports stop
drops out with them), the fullest KV cache among its replicas as cortex
polled it, and the engines' running + waiting requests from the last
health checks. `step` turns those signals, the model's
`[models.autoscale]` table and the previous `ScaleState` into the next one:

- the wanted count is ceil(load / target_in_flight), within min..max, at
  least 1 while anything is in flight or queued, and one more than now
  while a replica's KV cache is KV_FULL;
- the desired count follows it up only after the load has wanted more for
  `scale_up_after_s`, and down only after it has wanted fewer for
  `scale_down_after_s` (hysteresis: a spike or a dip shorter than that
  moves nothing, and a load that oscillates faster than the down delay
  keeps the replicas it scaled up to instead of flapping);
- a model at zero replicas wakes at once on the first request (its requests
  wait in cortex's admission queue meanwhile);
- with min_replicas = 0 the last replica goes after `idle_after_s()` with
  nothing in flight or queued;
- without any signal (no cortex reported, no engine count) nothing moves
  but the min/max clamps.

Nothing here reads a clock or acts: the controller passes `now` (its
monotonic clock) and applies the desired count (controller.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from cortex.cluster.decisions import ReplicaRecord
from cortex.cluster.spec import AutoscaleSpec
from cortex.cluster.status import CortexReport

# target_in_flight unset: this share of a replica's concurrency cap, so that
# a replica is added before its slots run out and requests queue.
TARGET_SHARE_OF_CAP = 0.7
# target_in_flight unset and no replica reported a cap (none ready yet, or
# admission off): requests per replica.
DEFAULT_TARGET_IN_FLIGHT = 8.0
# An engine count older than this (controller's clock) is not a signal.
ENGINE_COUNT_TTL_S = 15.0
# A replica's KV cache this full wants one more replica, whatever the count
# of requests says (long prompts fill the cache before the slots run out).
KV_FULL = 0.9


class Direction(Enum):
    UP = "up"
    DOWN = "down"


class Reason(Enum):
    """Why the desired count moved (a metrics label: a closed set)."""

    LOAD = "load"  # the load wanted more or fewer replicas for long enough
    WAKE = "wake"  # a request for a model at zero replicas
    IDLE = "idle"  # nothing in flight or queued for idle_after_s
    BOUNDS = "bounds"  # the table's min/max changed under the count


@dataclass(frozen=True)
class Signals:
    """A model's load as the controller sees it now."""

    in_flight: int = 0  # cortex's requests on its replicas (fresh reports)
    queued: int = 0  # waiting in cortex's admission queues
    engine: int | None = None  # engines' running + waiting, fresh counts only
    cap: int | None = None  # a replica's concurrency cap as cortex reports it
    kv_usage: float | None = None  # the fullest replica's KV cache (0..1), if reported
    reported: bool = False  # some cortex reported lately

    @property
    def load(self) -> int:
        """Requests the model carries: cortex's view, or the engines' when
        they count more (a cortex whose report is late still sends)."""
        return max(self.in_flight + self.queued, self.engine or 0)

    @property
    def known(self) -> bool:
        return self.reported or self.engine is not None


@dataclass(frozen=True)
class Decision:
    """The last change of a model's desired count, for its status."""

    desired: int
    previous: int
    direction: Direction
    reason: Reason
    detail: str
    at: float  # the controller's monotonic clock


@dataclass(frozen=True)
class ScaleState:
    """What the controller keeps per autoscaled model between passes."""

    desired: int
    # Since when the load has wanted more (fewer) replicas than `desired`.
    more_since: float | None = None
    fewer_since: float | None = None
    # The last pass that saw anything in flight or queued (None: none yet;
    # the idle time counts from the first pass).
    busy_at: float | None = None
    last: Decision | None = None


def target_in_flight(scale: AutoscaleSpec, cap: int | None) -> float:
    """Requests one replica should carry."""
    if scale.target_in_flight is not None:
        return scale.target_in_flight
    if cap:
        return max(cap * TARGET_SHARE_OF_CAP, 1.0)
    return DEFAULT_TARGET_IN_FLIGHT


def initial_state(scale: AutoscaleSpec, start: int, running: int) -> ScaleState:
    """A controller's first state for a model: the replicas it adopted
    (`running`, within min..max) when there are any, so that a restarted
    controller neither kills the replicas a load scaled up to nor counts
    them twice; else the spec's starting count. The signals move it from
    there like any other count."""
    count = running if running else start
    return ScaleState(desired=min(max(count, scale.min_replicas), scale.max_replicas))


def signals(
    model: str,
    replicas: Iterable[ReplicaRecord],
    reports: Iterable[tuple[CortexReport, float]],
    now: float,
) -> Signals:
    """The load on `model` from the fresh cortex `reports` (each with its
    age) and the engine counts of its `replicas` younger than
    ENGINE_COUNT_TTL_S at `now`."""
    mine = [r for r in replicas if r.model == model]
    addresses = {r.address for r in mine if r.address}
    in_flight = queued = 0
    caps: list[int] = []
    kv: list[float] = []
    reported = False
    for report, _ in reports:
        reported = True
        in_flight += sum(n for address, n in report.in_flight.items() if address in addresses)
        queued += report.queued.get(model, 0)
        if report.caps.get(model):
            caps.append(report.caps[model])
        if model in report.kv_usage:
            kv.append(report.kv_usage[model])
    counts = [
        r.engine_running + r.engine_waiting
        for r in mine
        if r.engine_running is not None
        and r.engine_waiting is not None
        and r.load_at is not None
        and now - r.load_at <= ENGINE_COUNT_TTL_S
    ]
    return Signals(
        in_flight=in_flight,
        queued=queued,
        engine=sum(counts) if counts else None,
        cap=max(caps) if caps else None,
        kv_usage=max(kv) if kv else None,
        reported=reported,
    )


def step(scale: AutoscaleSpec, state: ScaleState, seen: Signals, now: float) -> ScaleState:
    """The state after one pass at `now` that saw `seen`."""
    load = seen.load
    busy_at = now if load > 0 or state.busy_at is None else state.busy_at
    state = replace(state, busy_at=busy_at)
    target = target_in_flight(scale, seen.cap)
    why = f"{seen.in_flight} in flight + {seen.queued} queued"
    if seen.engine is not None:
        why += f" (engines: {seen.engine})"
    full = seen.kv_usage is not None and seen.kv_usage >= KV_FULL
    if full:
        why += f", KV cache {seen.kv_usage:.0%} full"
    why += f", target {target:g} per replica"

    low, high = scale.min_replicas, scale.max_replicas
    if not low <= state.desired <= high:
        bound = min(max(state.desired, low), high)
        return _moved(state, bound, Reason.BOUNDS, f"the table allows {low}..{high}", now)
    if not seen.known:
        return replace(state, more_since=None, fewer_since=None)
    wanted = min(max(math.ceil(load / target), low, 1 if load else 0), high)
    if full and state.desired:
        wanted = min(max(wanted, state.desired + 1), high)
    if state.desired == 0 and load > 0:
        return _moved(state, wanted, Reason.WAKE, f"{why}: woken by a request", now)
    if wanted > state.desired:
        since = state.more_since if state.more_since is not None else now
        state = replace(state, more_since=since, fewer_since=None)
        if now - since >= scale.scale_up_after_s:
            held = f"{why}: {wanted} wanted for {now - since:.1f} s"
            return _moved(state, wanted, Reason.LOAD, held, now)
        return state
    if wanted < state.desired:
        since = state.fewer_since if state.fewer_since is not None else now
        state = replace(state, more_since=None, fewer_since=since)
        idle = now - busy_at
        if wanted == 0 and idle >= scale.idle_after_s():
            return _moved(state, 0, Reason.IDLE, f"nothing in flight for {idle:.1f} s", now)
        down_to = max(wanted, 1)
        if state.desired > down_to and now - since >= scale.scale_down_after_s:
            held = f"{why}: {down_to} enough for {now - since:.1f} s"
            return _moved(state, down_to, Reason.LOAD, held, now)
        return state
    return replace(state, more_since=None, fewer_since=None)


def _moved(state: ScaleState, desired: int, reason: Reason, detail: str, now: float) -> ScaleState:
    direction = Direction.UP if desired > state.desired else Direction.DOWN
    decision = Decision(desired, state.desired, direction, reason, detail, now)
    return replace(state, desired=desired, more_since=None, fewer_since=None, last=decision)
