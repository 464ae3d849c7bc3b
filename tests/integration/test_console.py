"""What a person sees: `neuraxis up` on a terminal (the session's stack runs
on a pseudo-terminal: harness/terminal.py) prints its progress from start to
ready and nothing else (no JSON, no third-party noise), and stays quiet while
it serves. Its end on Ctrl-C during a streamed request (the stream ends with
its terminal events, no traceback) is the last test of the session:
tests/integration/test_embedded_shutdown.py.

`up --auth required` is wired to cortex by the same command line in either
mode (tests/unit/neuraxis/test_embedded.py::
test_cortex_is_started_with_the_same_command_line_in_either_mode, with the
state directory: test_routing_is_passed_to_cortex_when_given), and a key
made after cortex started works at once (tests/integration/test_auth.py::
test_a_new_key_works_at_once_and_the_health_routes_stay_open).
"""

from __future__ import annotations

import re

import pytest

from harness.stacks import EMBEDDING_MODEL, MODEL, Stack

pytestmark = pytest.mark.integration

READY = r"^neuraxis: ready: http"


def _start_to_ready(text: str) -> list[str]:
    lines = text.split("\n")
    end = next(i for i, line in enumerate(lines) if line.startswith("neuraxis: ready: "))
    return lines[: end + 1]


def test_the_console_from_start_to_ready_is_the_progress(stack: Stack) -> None:
    text = stack.terminal.wait_for(READY, 10, stack.proc.alive)
    lines = _start_to_ready(text)
    print("\n".join(lines))  # the closing note's copy (pytest -s)
    assert all(line.startswith("neuraxis: ") for line in lines), lines
    said = "\n".join(lines)
    assert re.search(r"^neuraxis: models prepared in [\d.]+ s", said, re.MULTILINE)
    assert re.search(r"^neuraxis: Ray started on 127\.0\.0\.1:\d+ in [\d.]+ s", said, re.M)
    for model in (MODEL, EMBEDDING_MODEL):
        assert re.search(rf"^neuraxis: {model}: loading \(", said, re.MULTILINE), said
        assert re.search(rf"^neuraxis: {model}: ready in [\d.]+ s at 127\.0\.0\.1:", said, re.M)
    assert lines[-1] == f"neuraxis: ready: {stack.base_url}"
    assert not [line for line in lines if "{" in line or "warning" in line.lower()]


def test_up_stays_quiet_while_it_serves(stack: Stack) -> None:
    """Requests served since ready leave the console as it was: cortex's
    request logs are for a file or the journal, not a person."""
    text = stack.terminal.text()
    after = text[text.index("Press Ctrl-C to stop.") :]
    assert "neuraxis.cortex.requests" not in after
    assert not [line for line in after.split("\n") if line.lstrip().startswith("{")], after
