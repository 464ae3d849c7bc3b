"""The controller's record of lost replicas: each waits for the replica that
replaces it, and once that one serves the pair is kept as a `Failover` (the
last FAILOVERS_KEPT, for the status)."""

from __future__ import annotations

from cortex.cluster.status import Failover, Failure

# Failovers kept for the status.
FAILOVERS_KEPT = 20


class FailoverLog:
    def __init__(self) -> None:
        self._pending: dict[str, list[Failure]] = {}
        self._done: list[Failover] = []

    def lost(self, model: str, replica: str, reason: str, address: str | None, at: float) -> None:
        """A replica of `model` was lost at `at` (wall time); the next one
        placed replaces it."""
        failure = Failure(
            model=model, replica=replica, reason=reason, failed_at=at, address=address
        )
        self._pending.setdefault(model, []).append(failure)

    def claim(self, model: str) -> Failure | None:
        """The oldest loss of `model` a new replica replaces, if any."""
        pending = self._pending.get(model)
        return pending.pop(0) if pending else None

    def unclaim(self, failure: Failure) -> None:
        """Its replacement failed to start: the next one replaces it."""
        self._pending.setdefault(failure.model, []).insert(0, failure)

    def replaced(self, failure: Failure, replica: str, address: str | None, at: float) -> None:
        failover = Failover.of(failure, replica, address, at)
        self._done = [*self._done[-(FAILOVERS_KEPT - 1) :], failover]

    def recent(self) -> list[Failover]:
        return list(self._done)
