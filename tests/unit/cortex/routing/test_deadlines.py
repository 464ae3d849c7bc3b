from __future__ import annotations

from cortex.routing.deadlines import Deadlines, RequestDeadline
from harness.clock import ManualClock as Clock


def test_the_first_wait_is_the_first_token_deadline_then_the_idle_one() -> None:
    clock = Clock()
    deadline = RequestDeadline(Deadlines(first_token_s=10, idle_s=2, total_s=100), clock)
    assert deadline.wait(started=False) == (10, "first token")
    assert deadline.wait(started=True) == (2, "idle")


def test_the_total_deadline_bounds_every_wait_and_is_kept_across_attempts() -> None:
    clock = Clock()
    deadline = RequestDeadline(Deadlines(first_token_s=10, idle_s=2, total_s=30), clock)
    clock.now += 25  # a first attempt took this long; the retry keeps the clock
    assert deadline.remaining() == 5
    assert deadline.wait(started=False) == (5, "total")
    clock.now += 6
    assert deadline.remaining() == 0
    assert deadline.wait(started=True) == (0, "total")


def test_the_error_names_the_deadline_that_passed() -> None:
    deadline = RequestDeadline(Deadlines(first_token_s=10, idle_s=2, total_s=30), Clock())
    assert "idle deadline of 2 s" in deadline.exceeded("idle").message
    assert "first token deadline of 10 s" in deadline.exceeded("first token").message
