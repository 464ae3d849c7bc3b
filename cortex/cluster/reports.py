"""The cortex instances' reports as the controller keeps them: the last one
of each instance, for REPORT_TTL_S, so that a cortex that stopped drops out
of the status on its own."""

from __future__ import annotations

from cortex.cluster.status import CortexReport

# A cortex report older than this no longer counts (cortex reports every
# REPORT_S, cortex/cluster/client.py; a few missed reports are tolerated).
REPORT_TTL_S = 15.0


class CortexReports:
    def __init__(self) -> None:
        self._last: dict[str, tuple[CortexReport, float]] = {}

    def add(self, report: CortexReport, now: float) -> None:
        """`report` received at `now` (the controller's monotonic clock)."""
        self._last[report.instance] = (report, now)

    def fresh(self, now: float) -> list[tuple[CortexReport, float]]:
        """The reports younger than REPORT_TTL_S, each with its age."""
        for instance, (_, at) in list(self._last.items()):
            if now - at > REPORT_TTL_S:
                del self._last[instance]
        return [(r, now - at) for r, at in self._last.values()]
