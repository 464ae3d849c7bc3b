"""What `neuraxis up` tells the person at the console while the cluster
starts: each replica loading, then ready with the time it took, or why it
could not start or be placed.

`StartProgress` is pure: it is fed the controller's status (the typed
ClusterStatus `neuraxis status` prints) with the time it was read, and
returns the lines that became true since the last one. Reading the status,
and printing, are replica_watch.py's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from cortex.cluster.status import ClusterStatus, ModelStatus, ReplicaState, ReplicaStatus


class Level(Enum):
    INFO = "info"
    WARNING = "warning"


@dataclass(frozen=True)
class Line:
    level: Level
    text: str


@dataclass
class _Seen:
    state: ReplicaState | None
    since: float  # when this run first saw the replica


@dataclass
class StartProgress:
    """Replica transitions as lines, each said once."""

    _replicas: dict[str, _Seen] = field(default_factory=dict)
    _problems: dict[str, str] = field(default_factory=dict)

    def update(self, status: ClusterStatus, now: float) -> list[Line]:
        lines: list[Line] = []
        for model in status.models:
            for replica in model.replicas:
                lines += self._replica(model.id, replica, now)
            lines += self._problem(model)
        return lines

    def _replica(self, model: str, replica: ReplicaStatus, now: float) -> list[Line]:
        seen = self._replicas.setdefault(replica.id, _Seen(None, now))
        if replica.state is seen.state:
            return []
        seen.state = replica.state
        where = f" on {replica.generation.value}" if replica.generation else ""
        if replica.state is ReplicaState.STARTING:
            return [Line(Level.INFO, f"{model}: loading ({replica.id}{where})")]
        if replica.state is ReplicaState.READY:
            took = now - seen.since
            return [Line(Level.INFO, f"{model}: ready in {took:.1f} s at {replica.address}")]
        if replica.state is ReplicaState.UNHEALTHY:
            return [Line(Level.WARNING, f"{model}: {replica.id} is unhealthy")]
        return []

    def _problem(self, model: ModelStatus) -> list[Line]:
        problem = model.unplaceable or model.last_start_error
        if not problem or self._problems.get(model.id) == problem:
            return []
        self._problems[model.id] = problem
        verb = "cannot be placed" if model.unplaceable else "failed to start"
        return [Line(Level.WARNING, f"{model.id} {verb}: {_one_line(problem)}")]


def _one_line(text: str, limit: int = 300) -> str:
    """A start error carries the neuron's last log lines: the console gets
    them on one line, cut short (`neuraxis status` and the log have it all)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
