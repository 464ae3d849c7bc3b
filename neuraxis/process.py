"""Stopping a child process and everything it started.

Used by `neuraxis up` and by the tests. The child must lead its own process
group (start it with start_new_session=True): vLLM's engine core and workers
run in that group, and whatever of it outlives the child is killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def stop_process_group(
    child: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 40.0
) -> int:
    """Send `sig` to the child and wait up to timeout_s for it to exit (a drain);
    give the rest of its group 10 s to follow; then SIGKILL what is left."""
    pgid = child.pid
    if child.poll() is None:
        child.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=timeout_s)
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return child.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
