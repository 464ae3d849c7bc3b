"""The controller's status as typed data, and the pure function that
assembles it from what the controller knows: what `neuraxis status` prints
and what the controller actor returns (as JSON-able data, since it crosses
Ray's wire and is printed with `--json`).

The types are frozen pydantic models: `model_dump(mode="json")` is their
wire form and `read` its inverse, which refuses a missing or unknown field
(TypeError) rather than guessing (a peer of another version). No Ray here,
and no rendering (neuraxis/status.py renders).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from enum import Enum
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from axon.generations import Generation
from cortex.cluster.nodes import NodeMark
from cortex.cluster.placement import NodeView, eligibility
from cortex.cluster.spec import DeploymentSpec, ModelSpec

if TYPE_CHECKING:
    from cortex.cluster.autoscale import ScaleState
    from cortex.cluster.decisions import ReplicaRecord

# A replica not placed after this long is reported as waiting for resources.
PENDING_REPORT_S = 10.0
# The validation context under which `read` asks for every field.
_EXACT = "exact"


class ReplicaState(Enum):
    PENDING = "pending"  # waiting for the cluster to place the replica
    STARTING = "starting"  # placed; the neuron is loading
    READY = "ready"
    UNHEALTHY = "unhealthy"  # out of the table; replaced if it stays so
    DRAINING = "draining"


class _Status(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def read(cls, data: Any) -> Self:
        """The wire form back as the type; every field present, none unknown."""
        return cls.model_validate(data, context=_EXACT)

    @model_validator(mode="before")
    @classmethod
    def _exact(cls, data: Any, info: ValidationInfo) -> Any:
        # Only when read from the wire: in code, a field left out takes its default.
        if info.context == _EXACT and isinstance(data, dict):
            names = set(cls.model_fields)
            if set(data) != names:
                missing = ", ".join(sorted(names - set(data))) or "none"
                unknown = ", ".join(sorted(set(data) - names)) or "none"
                # Not a ValueError: pydantic would wrap it; callers expect TypeError.
                raise TypeError(
                    f"{cls.__name__}: missing fields: {missing}; unknown fields: {unknown}"
                )
        return data


class NodeStatus(_Status):
    node_id: str
    host: str
    generation: Generation | None
    gpus: int
    alive: bool
    # "cordoned" or "draining" (neuraxis node ...), None when schedulable.
    mark: str | None = None


class ReplicaStatus(_Status):
    id: str
    state: ReplicaState
    # Why a pending replica is still pending, once that has taken a while.
    waiting: str | None = None
    address: str | None = None
    host: str | None = None
    node_id: str | None = None
    generation: Generation | None = None
    # The engine's running + waiting requests at the last health check.
    in_flight: int | None = None
    pid: int | None = None  # the neuron process, on its node
    log: str | None = None  # the neuron's log file, on its node
    # The engine's own counts at the last health check, and how old they are
    # (seconds) when the status is read: a figure without its age would pass
    # a stale count off as the current one.
    engine_running: int | None = None
    engine_waiting: int | None = None
    load_age_s: float | None = None
    # Requests the cortex instances that reported lately have in flight on
    # this replica (None: no cortex reported).
    cortex_in_flight: int | None = None
    # Its start, in wall times: when the controller created it, Ray placed
    # it, and its neuron first answered SERVING (None: not yet, or not seen
    # by this controller: an adopted replica). A cold start's parts.
    created_at: float | None = None
    placed_at: float | None = None
    ready_at: float | None = None


class _PlaneView(_Status):
    """The control plane as a cortex sees it (cortex/cluster/plane.py):
    whether the head answers (None: not probed yet), seconds since the
    controller last confirmed its table, and the controllers that replaced
    the one it followed with the replicas they adopted."""

    head_up: bool | None = None
    table_age_s: float | None = None
    controller_restarts: int = 0
    adopted: int = 0


class CortexReport(_PlaneView):
    """What one cortex instance tells the controller every few seconds: who
    it is and the requests it has in flight per neuron address. Several
    instances route to the same replicas, so only their sum is the
    gateway's view of a replica."""

    instance: str  # host:pid, unique per process (each --workers worker too)
    host: str
    pid: int
    in_flight: dict[str, int]  # neuron address -> requests in flight
    table_version: int  # the endpoint table it routes on
    # Per model: requests waiting in its admission queue (a model at zero
    # replicas with some waiting is woken: cortex/cluster/autoscale.py), and
    # the largest concurrency cap among its ready replicas (0: none known).
    queued: dict[str, int] = Field(default_factory=dict)
    caps: dict[str, int] = Field(default_factory=dict)
    # Per model: the fullest KV cache (0..1) among its ready replicas, where
    # the engines report it.
    kv_usage: dict[str, float] = Field(default_factory=dict)


class ScalingView(_Status):
    """The controller's answer to a cortex report: what cortex exports of
    autoscaling (metrics) and sizes its wake timeouts by."""

    # Autoscaled models' desired counts.
    desired: dict[str, int] = Field(default_factory=dict)
    # Decisions since the controller started, "model/direction/reason" -> count.
    decisions: dict[str, int] = Field(default_factory=dict)
    # Seconds the last replica of each model took from placement to SERVING.
    load_s: dict[str, float] = Field(default_factory=dict)


class CortexStatus(_PlaneView):
    """A cortex instance as the status shows it: its report and its age."""

    instance: str
    host: str
    pid: int
    in_flight: int  # its requests in flight, over every replica
    table_version: int
    reported_s_ago: float


class ScalingStatus(_Status):
    """An autoscaled model's table and the last change of its count."""

    min_replicas: int
    max_replicas: int
    # The last decision: "up" or "down", why ("load", "wake", "idle",
    # "bounds"), the figures behind it, and how long ago (s).
    direction: str | None = None
    reason: str | None = None
    detail: str | None = None
    decided_s_ago: float | None = None


class ModelStatus(_Status):
    id: str
    desired: int
    generations: list[Generation]
    gpus_per_replica: int
    unplaceable: str | None = None
    last_start_error: str | None = None
    replicas: list[ReplicaStatus] = Field(default_factory=list)
    # None: a fixed `replicas` count.
    autoscale: ScalingStatus | None = None
    # The LoRA adapters its replicas serve (the spec's and those added at
    # run time), in the served spec's order.
    adapters: list[str] = Field(default_factory=list)


class Failure(_Status):
    """A replica that was lost, until its replacement is ready."""

    model: str
    replica: str
    reason: str
    failed_at: float  # wall time
    address: str | None


class Failover(Failure):
    """A lost replica and the one that replaced it."""

    replacement: str
    replacement_address: str | None
    ready_at: float
    seconds_to_ready: float

    @classmethod
    def of(
        cls, failure: Failure, replacement: str, address: str | None, ready_at: float
    ) -> Failover:
        return cls(
            **failure.model_dump(),
            replacement=replacement,
            replacement_address=address,
            ready_at=ready_at,
            seconds_to_ready=round(ready_at - failure.failed_at, 3),
        )


class ClusterStatus(_Status):
    nodes: list[NodeStatus] = Field(default_factory=list)
    models: list[ModelStatus] = Field(default_factory=list)
    failovers: list[Failover] = Field(default_factory=list)
    # The endpoint table's version.
    version: int = 0
    # Passes the controller has completed: a watcher waits on it to know that
    # the controller has looked again (rather than sleeping).
    passes: int = 0
    # The cortex instances that reported within the last REPORT_TTL_S.
    cortices: list[CortexStatus] = Field(default_factory=list)
    # This controller's table epoch, and the running replicas it adopted
    # when it started.
    epoch: str | None = None
    adopted: int = 0


def waiting_reason(replica: ReplicaRecord, gpus: int, now: float) -> str | None:
    """Why a replica is still pending, once it has been for a while (wall
    time `now`)."""
    if replica.state is not ReplicaState.PENDING or now - replica.created <= PENDING_REPORT_S:
        return None
    return f"waiting for a node with {gpus} free GPUs" if gpus else "waiting for the cluster"


def cluster_status(
    spec: DeploymentSpec,
    replicas: Iterable[ReplicaRecord],
    nodes: Iterable[NodeView],
    reports: Iterable[tuple[CortexReport, float]],
    *,
    marks: Mapping[str, NodeMark],
    unplaceable: Mapping[str, str],
    desired: Mapping[str, int] | None = None,
    scaling: Mapping[str, ScaleState] | None = None,
    start_errors: Mapping[str, str],
    failovers: list[Failover],
    version: int,
    epoch: str | None,
    passes: int,
    adopted: int,
    now: float,
    monotonic: float,
) -> ClusterStatus:
    """The status of every model of `spec` with its `replicas`, the `nodes`
    with their `marks`, and the cortex instances by their fresh `reports`
    (each with its age); the other fields are the controller's own. `now`
    is wall time, `monotonic` the controller's clock (the load ages)."""
    records = list(replicas)
    fresh = sorted(reports, key=lambda item: item[0].instance)
    models = [
        ModelStatus(
            id=model.id,
            desired=(desired or {}).get(model.id, model.replicas),
            generations=eligibility(model).generations,
            gpus_per_replica=model.gpus_per_replica(),
            unplaceable=unplaceable.get(model.id),
            last_start_error=start_errors.get(model.id),
            replicas=[
                _replica_status(r, model, fresh, now, monotonic)
                for r in records
                if r.model == model.id
            ],
            autoscale=_scaling(model, (scaling or {}).get(model.id), monotonic),
            adapters=[a.id for a in model.adapters],
        )
        for model in spec.models
    ]
    return ClusterStatus(
        nodes=[NodeStatus(**asdict(n), mark=_mark(marks.get(n.node_id))) for n in nodes],
        models=models,
        cortices=[
            CortexStatus(
                **report.model_dump(
                    exclude={"in_flight", "table_age_s", "queued", "caps", "kv_usage"}
                ),
                in_flight=sum(report.in_flight.values()),
                table_age_s=_rounded(report.table_age_s),
                reported_s_ago=round(age, 1),
            )
            for report, age in fresh
        ],
        failovers=failovers,
        version=version,
        passes=passes,
        epoch=epoch,
        adopted=adopted,
    )


# The fields a replica's status takes from its record as they are.
_AS_RECORDED = (
    "id",
    "state",
    "address",
    "host",
    "node_id",
    "generation",
    "pid",
    "log",
    "engine_running",
    "engine_waiting",
    "placed_at",
    "ready_at",
)


def _replica_status(
    replica: ReplicaRecord,
    model: ModelSpec,
    reports: list[tuple[CortexReport, float]],
    now: float,
    monotonic: float,
) -> ReplicaStatus:
    engine = None
    if replica.engine_running is not None and replica.engine_waiting is not None:
        engine = replica.engine_running + replica.engine_waiting
    cortex_in_flight = None
    if reports and replica.address:
        cortex_in_flight = sum(r.in_flight.get(replica.address, 0) for r, _ in reports)
    return ReplicaStatus(
        **{name: getattr(replica, name) for name in _AS_RECORDED},
        waiting=waiting_reason(replica, model.gpus_per_replica(), now),
        in_flight=engine,
        load_age_s=None if replica.load_at is None else _rounded(monotonic - replica.load_at),
        cortex_in_flight=cortex_in_flight,
        created_at=replica.created,
    )


def _scaling(model: ModelSpec, state: ScaleState | None, monotonic: float) -> ScalingStatus | None:
    table = model.autoscale
    if table is None:
        return None
    last = state.last if state is not None else None
    return ScalingStatus(
        min_replicas=table.min_replicas,
        max_replicas=table.max_replicas,
        direction=last.direction.value if last else None,
        reason=last.reason.value if last else None,
        detail=last.detail if last else None,
        decided_s_ago=round(monotonic - last.at, 1) if last else None,
    )


def _mark(mark: NodeMark | None) -> str | None:
    return mark.value if mark is not None else None


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)
