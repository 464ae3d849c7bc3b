"""Prints the fuzz run's counts at the end of pytest's report."""

from __future__ import annotations

from _pytest.terminal import TerminalReporter

from tests.fuzz.test_fuzz import REPORT


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("fuzz counts")
        for line in REPORT:
            terminalreporter.write_line(line)
