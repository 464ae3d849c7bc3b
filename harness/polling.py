"""Waiting on a condition in tests: poll it until it holds or time runs out."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Whether `condition` came to hold within `timeout_s`, asked every
    `interval_s`; the caller asserts, so that its message says what was awaited."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True
