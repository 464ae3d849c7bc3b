"""The controller's status as typed data: what `neuraxis status` prints and
what the controller actor returns (as a JSON-able dict, since it crosses
Ray's wire and is printed with `--json`).

`to_dict` and `from_dict` are each other's inverse; `from_dict` refuses a
missing or unknown field (TypeError) rather than guessing. No Ray
here, and no rendering (neuraxis/app/status.py renders).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from neuraxis.core.generations import Generation


class ReplicaState(Enum):
    PENDING = "pending"  # waiting for the cluster to place the replica
    STARTING = "starting"  # placed; the neuron is loading
    READY = "ready"
    UNHEALTHY = "unhealthy"  # out of the table; replaced if it stays so
    DRAINING = "draining"


def _exact(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """`data`, once it has exactly the fields of dataclass `cls`."""
    names = {f.name for f in fields(cls)}
    if set(data) != names:
        missing = ", ".join(sorted(names - set(data))) or "none"
        unknown = ", ".join(sorted(set(data) - names)) or "none"
        raise TypeError(f"{cls.__name__}: missing fields: {missing}; unknown fields: {unknown}")
    return data


def _generation(value: str | None) -> Generation | None:
    return Generation(value) if value is not None else None


def _value(generation: Generation | None) -> str | None:
    return generation.value if generation is not None else None


@dataclass(frozen=True)
class NodeStatus:
    node_id: str
    host: str
    generation: Generation | None
    gpus: int
    alive: bool
    # "cordoned" or "draining" (neuraxis node ...), None when schedulable.
    mark: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "host": self.host,
            "generation": _value(self.generation),
            "gpus": self.gpus,
            "alive": self.alive,
            "mark": self.mark,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeStatus:
        data = _exact(cls, data)
        return cls(**{**data, "generation": _generation(data["generation"])})


@dataclass(frozen=True)
class ReplicaStatus:
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state.value,
            "waiting": self.waiting,
            "address": self.address,
            "host": self.host,
            "node_id": self.node_id,
            "generation": _value(self.generation),
            "in_flight": self.in_flight,
            "pid": self.pid,
            "log": self.log,
            "engine_running": self.engine_running,
            "engine_waiting": self.engine_waiting,
            "load_age_s": self.load_age_s,
            "cortex_in_flight": self.cortex_in_flight,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplicaStatus:
        data = _exact(cls, data)
        return cls(
            **{
                **data,
                "state": ReplicaState(data["state"]),
                "generation": _generation(data["generation"]),
            }
        )


@dataclass(frozen=True)
class CortexReport:
    """What one cortex instance tells the controller every few seconds: who
    it is and the requests it has in flight per neuron address. Several
    instances route to the same replicas, so only their sum is the
    gateway's view of a replica."""

    instance: str  # host:pid, unique per process (each --workers worker too)
    host: str
    pid: int
    in_flight: dict[str, int]  # neuron address -> requests in flight
    table_version: int  # the endpoint table it routes on
    # The control plane as it sees it (cortex/cluster/plane.py): whether the
    # head answers (None: not probed yet), seconds since the controller last
    # confirmed its table, and the controllers that replaced the one it
    # followed with the replicas they adopted.
    head_up: bool | None = None
    table_age_s: float | None = None
    controller_restarts: int = 0
    adopted: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "host": self.host,
            "pid": self.pid,
            "in_flight": dict(self.in_flight),
            "table_version": self.table_version,
            "head_up": self.head_up,
            "table_age_s": self.table_age_s,
            "controller_restarts": self.controller_restarts,
            "adopted": self.adopted,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CortexReport:
        return cls(**_exact(cls, data))


@dataclass(frozen=True)
class CortexStatus:
    """A cortex instance as the status shows it: its report and its age."""

    instance: str
    host: str
    pid: int
    in_flight: int  # its requests in flight, over every replica
    table_version: int
    reported_s_ago: float
    # As in its report (CortexReport).
    head_up: bool | None = None
    table_age_s: float | None = None
    controller_restarts: int = 0
    adopted: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "host": self.host,
            "pid": self.pid,
            "in_flight": self.in_flight,
            "table_version": self.table_version,
            "reported_s_ago": self.reported_s_ago,
            "head_up": self.head_up,
            "table_age_s": self.table_age_s,
            "controller_restarts": self.controller_restarts,
            "adopted": self.adopted,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CortexStatus:
        return cls(**_exact(cls, data))


@dataclass(frozen=True)
class ModelStatus:
    id: str
    desired: int
    generations: list[Generation]
    gpus_per_replica: int
    unplaceable: str | None = None
    last_start_error: str | None = None
    replicas: list[ReplicaStatus] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "desired": self.desired,
            "generations": [g.value for g in self.generations],
            "gpus_per_replica": self.gpus_per_replica,
            "unplaceable": self.unplaceable,
            "last_start_error": self.last_start_error,
            "replicas": [r.to_dict() for r in self.replicas],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelStatus:
        data = _exact(cls, data)
        return cls(
            **{
                **data,
                "generations": [Generation(g) for g in data["generations"]],
                "replicas": [ReplicaStatus.from_dict(r) for r in data["replicas"]],
            }
        )


@dataclass(frozen=True)
class Failure:
    """A replica that was lost, until its replacement is ready."""

    model: str
    replica: str
    reason: str
    failed_at: float  # wall time
    address: str | None


@dataclass(frozen=True)
class Failover:
    """A lost replica and the one that replaced it."""

    model: str
    replica: str
    reason: str
    failed_at: float
    address: str | None
    replacement: str
    replacement_address: str | None
    ready_at: float
    seconds_to_ready: float

    @classmethod
    def of(
        cls, failure: Failure, replacement: str, address: str | None, ready_at: float
    ) -> Failover:
        return cls(
            model=failure.model,
            replica=failure.replica,
            reason=failure.reason,
            failed_at=failure.failed_at,
            address=failure.address,
            replacement=replacement,
            replacement_address=address,
            ready_at=ready_at,
            seconds_to_ready=round(ready_at - failure.failed_at, 3),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "replica": self.replica,
            "reason": self.reason,
            "failed_at": self.failed_at,
            "address": self.address,
            "replacement": self.replacement,
            "replacement_address": self.replacement_address,
            "ready_at": self.ready_at,
            "seconds_to_ready": self.seconds_to_ready,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Failover:
        return cls(**_exact(cls, data))


@dataclass(frozen=True)
class ClusterStatus:
    nodes: list[NodeStatus] = field(default_factory=list)
    models: list[ModelStatus] = field(default_factory=list)
    failovers: list[Failover] = field(default_factory=list)
    # The endpoint table's version.
    version: int = 0
    # Passes the controller has completed: a watcher waits on it to know that
    # the controller has looked again (rather than sleeping).
    passes: int = 0
    # The cortex instances that reported within the last REPORT_TTL_S.
    cortices: list[CortexStatus] = field(default_factory=list)
    # This controller's table epoch, and the running replicas it adopted
    # when it started.
    epoch: str | None = None
    adopted: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": [n.to_dict() for n in self.nodes],
            "models": [m.to_dict() for m in self.models],
            "failovers": [f.to_dict() for f in self.failovers],
            "version": self.version,
            "passes": self.passes,
            "cortices": [c.to_dict() for c in self.cortices],
            "epoch": self.epoch,
            "adopted": self.adopted,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterStatus:
        data = _exact(cls, data)
        return cls(
            **{
                **data,
                "nodes": [NodeStatus.from_dict(n) for n in data["nodes"]],
                "models": [ModelStatus.from_dict(m) for m in data["models"]],
                "failovers": [Failover.from_dict(f) for f in data["failovers"]],
                "cortices": [CortexStatus.from_dict(c) for c in data["cortices"]],
            }
        )
