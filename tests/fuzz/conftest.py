"""Prints the fuzz run's counts at the end of pytest's report."""

from __future__ import annotations

from _pytest.terminal import TerminalReporter

from tests.fuzz.test_fuzz import REPORT


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    lines = [
        str(value)
        for outcome in ("passed", "failed")
        for report in terminalreporter.stats.get(outcome, [])
        if report.when == "call"
        for name, value in report.user_properties
        if name == REPORT
    ]
    if lines:
        terminalreporter.section("fuzz counts")
        for line in lines:
            terminalreporter.write_line(line)
