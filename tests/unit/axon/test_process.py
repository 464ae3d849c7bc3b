"""Nothing a process started outlives it: the death signal given to forked
children, and the group kill after a supervised child exits. Real processes
(small Python children), no model."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import psutil
import pytest

from axon.process import (
    StopRequested,
    child_pids,
    interrupted_by_stop_signals,
    kill_children,
    kill_group_when_exits,
)

# A parent that installs the fork guard, forks a child (from the main thread
# or from a worker thread) that reports its death signal and its pid, then
# waits to be killed.
_PARENT = """
import ctypes, os, sys, threading, time
from axon.process import forked_children_die_with_this_process

forked_children_die_with_this_process()
libc = ctypes.CDLL(None)

def fork():
    pid = os.fork()
    if pid == 0:
        signal_number = ctypes.c_int()
        libc.prctl(2, ctypes.byref(signal_number))  # PR_GET_PDEATHSIG
        print(f"{{os.getpid()}} {{signal_number.value}}", flush=True)
        time.sleep(120)
        os._exit(0)

if {from_thread}:
    thread = threading.Thread(target=fork)
    thread.start()
    thread.join()
else:
    fork()
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start_parent(from_thread: bool) -> tuple[subprocess.Popen[bytes], int, int]:
    code = textwrap.dedent(_PARENT.format(from_thread=from_thread))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    with parent.stdout:  # one line is all it says; an open pipe left behind is a ResourceWarning
        child_pid, death_signal = (int(x) for x in parent.stdout.readline().split())
    return parent, child_pid, death_signal


def test_a_child_forked_by_the_main_thread_is_killed_with_its_parent() -> None:
    parent, child_pid, death_signal = _start_parent(from_thread=False)
    try:
        assert death_signal == signal.SIGKILL
        parent.kill()
        parent.wait()
        assert _wait_gone(child_pid), "the forked child outlived its SIGKILLed parent"
    finally:
        parent.kill()
        if not _gone(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def test_a_child_forked_by_a_worker_thread_gets_no_death_signal() -> None:
    # The kernel would send it when that thread ends, long before the process.
    parent, child_pid, death_signal = _start_parent(from_thread=True)
    try:
        assert death_signal == 0
    finally:
        parent.kill()
        parent.wait()
        os.kill(child_pid, signal.SIGKILL)


# A group leader that starts a grandchild with no death signal of its own.
_LEADER = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(grandchild.pid, flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def _group(leader_code: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A new process group whose leader runs `leader_code`, and the pid of
    the grandchild it printed; whatever is left of both killed at the end."""
    leader = subprocess.Popen(
        [sys.executable, "-c", leader_code], stdout=subprocess.PIPE, start_new_session=True
    )
    assert leader.stdout is not None
    with leader.stdout:
        grandchild = int(leader.stdout.readline())
    try:
        yield leader, grandchild
    finally:
        leader.kill()
        leader.wait()
        if not _gone(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_what_is_left_of_a_group_is_killed_when_its_leader_exits() -> None:
    with _group(_LEADER) as (leader, grandchild):
        watcher = kill_group_when_exits(leader)
        assert not _gone(grandchild)
        leader.kill()
        assert _wait_gone(grandchild), "the grandchild outlived its group's leader"
        watcher.join(timeout=5)
        assert not watcher.is_alive()


# The same leader, which arranges for its group to die with it first.
_REAPED_LEADER = "from axon.process import group_dies_with_this_process\n" + (
    "group_dies_with_this_process()\n" + _LEADER
)


def test_a_leader_that_asked_takes_its_group_with_it_however_it_dies() -> None:
    """No watcher in this process: the leader's own reaper kills the rest."""
    with _group(_REAPED_LEADER) as (leader, grandchild):
        assert not _gone(grandchild)
        leader.kill()
        assert _wait_gone(grandchild), "the grandchild outlived its group's leader"


def test_a_stop_signal_interrupts_a_synchronous_call_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    with pytest.raises(StopRequested, match="SIGTERM"), interrupted_by_stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # what vLLM's engine build is to the event loop
    assert time.monotonic() - started < 5
    assert signal.getsignal(signal.SIGTERM) is before


def test_kill_children_ends_what_came_since_and_keeps_the_older() -> None:
    older = subprocess.Popen(["sleep", "60"])
    try:
        before = child_pids()
        assert older.pid in before
        newer = subprocess.Popen(["sleep", "60"])
        kill_children(older=before)
        assert newer.wait(timeout=10) == -signal.SIGKILL
        assert older.poll() is None
    finally:
        older.kill()
        older.wait()
