"""The collector paused while large work runs in worker threads
(cortex/api/gc_paused.py): nested and concurrent holders, and a collector
that was off stays off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from cortex.api import gc_paused


@pytest.fixture(autouse=True)
def _collector_back() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_running_again_after() -> None:
    gc.enable()
    with gc_paused.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_it_runs_again_only_when_the_last_holder_leaves() -> None:
    gc.enable()
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused.paused():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(10)
    with gc_paused.paused():
        pass
    assert not gc.isenabled()  # the other thread is still inside
    leave.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with gc_paused.paused():
        pass
    assert not gc.isenabled()


def test_an_error_inside_still_resumes_it() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), gc_paused.paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
