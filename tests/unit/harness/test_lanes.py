"""`make test`'s lanes: the run's exit status from theirs, and the
turns their tests take."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.lanes import LOCK_ENV, Turns, lane_turn, outcome


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([0, 0], 0),
        ([0, 1], 1),
        ([2, 0], 2),
        ([1, 2], 1),
        ([0, 5], 0),  # a selection that leaves one lane empty
        ([5, 1], 1),
        ([5, 5], 5),  # nothing collected at all
    ],
)
def test_the_run_fails_when_a_lane_fails(codes: list[int], expected: int) -> None:
    assert outcome(codes) == expected


def _hold(quiet: bool, entered: threading.Event, leave: threading.Event) -> threading.Thread:
    """A thread that takes a turn, says so, and keeps it until `leave`."""

    def run() -> None:
        with lane_turn(quiet):
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_two_ordinary_turns_run_together(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "turns.lock"))
    leave = threading.Event()
    first, second = threading.Event(), threading.Event()
    threads = [_hold(False, first, leave), _hold(False, second, leave)]
    assert first.wait(5) and second.wait(5)
    leave.set()
    for thread in threads:
        thread.join(5)


def test_a_quiet_turn_waits_for_the_other_lanes_test_and_holds_back_the_next(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "turns.lock"))
    ordinary, quiet, after = threading.Event(), threading.Event(), threading.Event()
    leave_ordinary, leave_quiet, leave_after = (
        threading.Event(),
        threading.Event(),
        threading.Event(),
    )
    holding = _hold(False, ordinary, leave_ordinary)
    assert ordinary.wait(5)
    waiting = _hold(True, quiet, leave_quiet)
    assert not quiet.wait(0.3)  # the other lane's test still runs
    leave_ordinary.set()
    assert quiet.wait(5)
    next_one = _hold(False, after, leave_after)
    assert not after.wait(0.3)  # the other lane's next test waits its turn
    leave_quiet.set()
    assert after.wait(5)
    leave_after.set()
    for thread in (holding, waiting, next_one):
        thread.join(5)


def test_consecutive_quiet_tests_keep_one_turn_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "turns.lock"))
    turns = Turns()
    other, leave_other = threading.Event(), threading.Event()
    with turns.turn(quiet=True, next_quiet=True):
        pass
    # Between the two quiet tests the other lane gets no turn.
    waiting = _hold(False, other, leave_other)
    assert not other.wait(0.3)
    with turns.turn(quiet=True, next_quiet=False):
        assert not other.is_set()
    assert other.wait(5)  # the last quiet test let it go
    leave_other.set()
    waiting.join(5)
    with turns.turn(quiet=False, next_quiet=False):  # and ordinary turns go on
        pass


def test_no_turns_outside_the_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LOCK_ENV, raising=False)
    with lane_turn(True), lane_turn(True):  # would deadlock on a lock
        pass
