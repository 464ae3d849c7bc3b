from __future__ import annotations

import time

from harness.polling import wait_until


def test_true_once_the_condition_holds() -> None:
    answers = iter([False, False, True])
    assert wait_until(lambda: next(answers), timeout_s=5, interval_s=0.001)


def test_false_when_time_runs_out() -> None:
    started = time.monotonic()
    assert not wait_until(lambda: False, timeout_s=0.05, interval_s=0.01)
    assert time.monotonic() - started >= 0.05
