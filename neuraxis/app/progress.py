"""What `neuraxis up` tells the person at the console while the cluster
starts: each replica loading, then ready with the time it took, or why it
could not start or be placed.

`StartProgress` is pure: it is fed the controller's status (the dictionary
`neuraxis status --json` prints) with the time it was read, and returns the
lines that became true since the last one. Reading the status, and printing,
are embedded.py's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Level(Enum):
    INFO = "info"
    WARNING = "warning"


@dataclass(frozen=True)
class Line:
    level: Level
    text: str


@dataclass
class _Seen:
    state: str
    since: float  # when this run first saw the replica


@dataclass
class StartProgress:
    """Replica transitions as lines, each said once."""

    _replicas: dict[str, _Seen] = field(default_factory=dict)
    _problems: dict[str, str] = field(default_factory=dict)

    def update(self, status: dict[str, Any], now: float) -> list[Line]:
        lines: list[Line] = []
        for model in status.get("models", []):
            for replica in model.get("replicas", []):
                lines += self._replica(model["id"], replica, now)
            lines += self._problem(model)
        return lines

    def _replica(self, model: str, replica: dict[str, Any], now: float) -> list[Line]:
        seen = self._replicas.get(replica["id"])
        state = replica["state"]
        if seen is None:
            seen = self._replicas[replica["id"]] = _Seen("", now)
        if state == seen.state:
            return []
        seen.state = state
        where = f" on {replica['generation']}" if replica.get("generation") else ""
        if state == "starting":
            return [Line(Level.INFO, f"{model}: loading ({replica['id']}{where})")]
        if state == "ready":
            took = now - seen.since
            return [Line(Level.INFO, f"{model}: ready in {took:.1f} s at {replica.get('address')}")]
        if state == "unhealthy":
            return [Line(Level.WARNING, f"{model}: {replica['id']} is unhealthy")]
        return []

    def _problem(self, model: dict[str, Any]) -> list[Line]:
        problem = model.get("unplaceable") or model.get("last_start_error")
        if not problem or self._problems.get(model["id"]) == problem:
            return []
        self._problems[model["id"]] = problem
        verb = "cannot be placed" if model.get("unplaceable") else "failed to start"
        return [Line(Level.WARNING, f"{model['id']} {verb}: {_one_line(problem)}")]


def _one_line(text: str, limit: int = 300) -> str:
    """A start error carries the neuron's last log lines: the console gets
    them on one line, cut short (`neuraxis status` and the log have it all)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
