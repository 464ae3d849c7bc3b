"""Cortex reports as the controller keeps them: the last per instance,
until REPORT_TTL_S."""

from __future__ import annotations

from cortex.cluster.reports import REPORT_TTL_S, CortexReports
from cortex.cluster.status import CortexReport


def _report(instance: str, in_flight: int) -> CortexReport:
    return CortexReport(
        instance=instance, host="h", pid=1, in_flight={"n:1": in_flight}, table_version=1
    )


def test_the_last_report_of_each_instance_counts_until_it_ages_out() -> None:
    reports = CortexReports()
    reports.add(_report("a", 1), 0.0)
    reports.add(_report("a", 2), 5.0)  # replaces the first
    reports.add(_report("b", 3), 10.0)
    assert [(r.instance, r.in_flight["n:1"], age) for r, age in reports.fresh(10.0)] == [
        ("a", 2, 5.0),
        ("b", 3, 0.0),
    ]
    assert [r.instance for r, _ in reports.fresh(5.0 + REPORT_TTL_S + 0.1)] == ["b"]
