"""Stopping a child process and everything it started, and making sure that
nothing a process started outlives it.

Used by `neuraxis up`, the replica actor, the neuron and the tests. A
supervised child must lead its own process group (start it with
start_new_session=True): vLLM's engine core and workers run in that group,
and whatever of it outlives the child is killed. Finding `ray` and Ray's
fixed ports live here too; nothing here knows about cortex or the neuron."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
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


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (another user's counts)."""
    return _answers(os.kill, pid)


def _group_alive(pgid: int) -> bool:
    return _answers(os.killpg, pgid)


def _answers(send: Callable[[int, int], None], target: int) -> bool:
    """Whether signal 0 finds `target`: it is not sent, only checked."""
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        return True
    return True


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A preexec_fn: the kernel sends the child SIGTERM when the thread that
    started it dies, so that no child outlives a supervisor killed without
    the chance to clean up."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _Fork:
    """Set in the parent just before each fork, read in the child just after."""

    libc: ctypes.CDLL | None = None  # loaded before any fork: no dlopen in the child
    parent = 0
    from_main_thread = False


def forked_children_die_with_this_process() -> None:
    """From now on, every child this process forks from its main thread with
    os.fork (multiprocessing's fork method included) gets SIGKILL from the
    kernel when this process dies, however it dies (SIGKILL included), and so
    does every child those children fork that way. (subprocess children and
    multiprocessing's spawn method run no Python at the fork: for those, see
    kill_group_when_exits.)

    vLLM forks its engine core with multiprocessing and no death signal: a
    neuron killed with SIGKILL left the engine core running, holding the model's
    memory, reparented to init. SIGKILL because the parent that would have
    drained is already gone, and an orphaned engine core was seen ignoring
    SIGTERM for seconds. Only forks from the main thread: the kernel ties the
    signal to the forking thread, so a child forked from a short-lived worker
    thread would be killed when that thread ends."""
    if _Fork.libc is not None:
        return
    _Fork.libc = ctypes.CDLL(None, use_errno=True)
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _before_fork() -> None:
    _Fork.parent = os.getpid()
    _Fork.from_main_thread = threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    if not _Fork.from_main_thread or _Fork.libc is None:
        return
    _Fork.libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # The parent may have died between the fork and the prctl: then no
    # signal will ever come, and this child is already an orphan.
    if os.getppid() != _Fork.parent:
        os.kill(os.getpid(), signal.SIGKILL)


def child_pids() -> set[int]:
    """The processes this one started that are running, and theirs."""
    import psutil

    with contextlib.suppress(psutil.Error):
        return {child.pid for child in psutil.Process().children(recursive=True)}
    return set()


def kill_children(older: Collection[int] = ()) -> None:
    """SIGKILL the processes this one started (and theirs) but those in
    `older` (running before: not ours to end).

    For an engine whose build was interrupted: vLLM's engine core is
    spawned, not forked, so no death signal takes it with this process, and
    a neuron stopped while vLLM was starting it exited and left it running,
    reparented to init, with multiprocessing's resource tracker beside it."""
    import psutil

    for pid in child_pids() - set(older):
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


class _GroupReaper:
    """The write end of the pipe the group reaper reads: held open by this
    process alone (not inherited across exec) until it ends."""

    write_end: int | None = None


def group_dies_with_this_process() -> None:
    """If this process leads its own process group (a replica's neuron does),
    a small watcher kills the whole group once this process has ended, however
    it ended (SIGKILL included): the watcher waits for end of file on a pipe
    that only this process holds open, which the kernel closes at its exit.

    vLLM spawns its engine core in a replica's neuron, and spawned children
    carry no death signal. The replica actor's kill_group_when_exits covers
    a neuron that dies while the actor lives; it does not cover the actor
    killed first (the neuron then gets SIGKILL from its own death signal),
    which left an engine core and multiprocessing's resource tracker behind."""
    if _GroupReaper.write_end is not None or os.getpgid(0) != os.getpid():
        return
    read_end, write_end = os.pipe()  # neither end is inherited across exec
    subprocess.Popen(
        ["sh", "-c", 'read -r _; kill -9 -"$1"', "neuraxis-group-reaper", str(os.getpid())],
        stdin=read_end,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(read_end)
    _GroupReaper.write_end = write_end


def children_die_with_this_process() -> None:
    """Whatever this process starts from now on ends when it ends, however
    it ends: its forked children by their death signal, its spawned ones
    with its process group (when it leads one)."""
    forked_children_die_with_this_process()
    group_dies_with_this_process()


def kill_group_when_exits(child: subprocess.Popen[bytes]) -> threading.Thread:
    """Watch a child that leads its own process group: once it has exited, in
    any way, SIGKILL whatever is left of its group (its engine core, workers).

    For processes that do not die with it by themselves: children started
    with the spawn method, which cannot carry a death signal set at fork."""

    def watch() -> None:
        child.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)

    thread = threading.Thread(target=watch, name=f"group-reaper-{child.pid}", daemon=True)
    thread.start()
    return thread


def ray_binary() -> str:
    """The `ray` command of this environment."""
    beside = Path(sys.executable).parent / "ray"
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise FileNotFoundError("the `ray` command is not installed beside neuraxis")
    return found


# The environment of every `ray start`. On SIGTERM, `ray start --block` drains
# its node for up to RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S (Ray 2.60: 30 s by
# default), waiting for every worker lease to come back. A neuraxis node's
# replicas are detached actors that never give theirs back, and the
# controller drains them itself before a node goes (`neuraxis node drain`,
# `neuraxis cluster stop`): Ray's wait only added 30 s to every stop.
RAY_START_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}


def ray_start_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with RAY_START_ENV."""
    return {**(os.environ if env is None else env), **RAY_START_ENV}


# Options of every `ray start` (head and host agents). Every driver joins
# with log_to_driver=False, so Ray's log monitor, which tails each worker's
# log files to forward new lines to drivers, forwarded nothing while costing
# ~6.5 ms of CPU a second on an idle node: CPU that a small host's engine
# shares (docs/performance.md, "Again, with more runs").
QUIET_RAY_ARGS = ["--disable-usage-stats", "--include-log-monitor=false"]
# And on the head: no autoscaler monitor, a Python process polling the GCS
# for an autoscaler that neuraxis never runs (its controller places the
# replicas on the nodes that joined; nothing asks Ray for more nodes).
QUIET_HEAD_ARGS = [*QUIET_RAY_ARGS, "--no-monitor"]


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


class StopRequested(BaseException):
    """SIGTERM or SIGINT arrived during a synchronous call that holds the
    event loop (interrupted_by_stop_signals). A BaseException, so that the
    call's own `except Exception` does not swallow it."""


@contextlib.contextmanager
def interrupted_by_stop_signals() -> Iterator[None]:
    """(Main thread.) While inside, SIGTERM and SIGINT raise StopRequested in
    whatever Python code runs, then the previous handlers are back.

    vLLM builds its engine in one synchronous call of a minute or more,
    holding the neuron's event loop: the loop's own signal handlers ran only
    once it returned, so a neuron stopped while loading (`neuraxis up`
    stopped meanwhile, a replica replaced) went on loading for as long, and
    its stop timed out. The signal also reaches the loop's wakeup fd as
    before, so the loop still sees it once it runs."""

    def stop(signum: int, _frame: object) -> None:
        raise StopRequested(signal.Signals(signum).name)

    stop_signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, stop) for sig in stop_signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
