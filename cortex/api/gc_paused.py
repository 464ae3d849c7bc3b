"""Python's cyclic garbage collector paused while a worker thread builds or
parses something large (cortex/api/answers.py, cortex/api/route.py).

A collection holds the GIL for as long as it walks the live objects, and
such work makes new objects fast enough to start one collection after
another: building one 4,000-token choice with 20 alternatives started three
full collections of 12-30 ms each (2 loaded cores), and the event loop
waited through each. What this work makes is freed by reference counting
(slices of an answer, a refused body); the collector, paused meanwhile,
catches up on the rest once the last such thread is done. Paused for the
whole process, so for seconds at most: one large body is parsed at a time,
and an answer's build is bounded by the caps.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0  # threads inside paused(), while it paused a running collector
_resume = False


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection while inside (nested and concurrent uses
    count; the collector runs again when the last one leaves, if it ran
    when the first one came)."""
    global _holders, _resume
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()
