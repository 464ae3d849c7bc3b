"""Stopping a child process and everything it started.

Used by `neuraxis up` and by the tests. The child must lead its own process
group (start it with start_new_session=True): vLLM's engine core and workers
run in that group, and whatever of it outlives the child is killed."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


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


def die_with_parent() -> None:
    """A preexec_fn: the kernel sends the child SIGTERM when the thread that
    started it dies, so that no child outlives a supervisor killed without
    the chance to clean up."""
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def ray_binary() -> str:
    """The `ray` command of this environment."""
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise FileNotFoundError("the `ray` command is not installed beside neuraxis")
    return found


# Fixed Ray ports for hosts behind a firewall (deploy/firewalld/neuraxis-ray.xml
# opens exactly these); the GCS port is the head's ray_port (6379).
FIXED_RAY_PORT_ARGS = [
    "--node-manager-port",
    "6380",
    "--object-manager-port",
    "6381",
    "--runtime-env-agent-port",
    "6382",
    "--dashboard-agent-grpc-port",
    "6383",
    "--metrics-export-port",
    "6384",
    "--dashboard-agent-listen-port",
    "52365",
    "--min-worker-port",
    "10002",
    "--max-worker-port",
    "10999",
]
# The ports replicas' neurons take on such hosts (neuraxis-neuron.xml):
# gRPC and metrics, as "first-last" ranges, inherited by Ray's workers.
FIXED_REPLICA_PORTS = {
    "NEURAXIS_REPLICA_PORTS": "50051-50099",
    "NEURAXIS_REPLICA_METRICS_PORTS": "9400-9449",
}
