"""The children of `neuraxis up`, supervised as systemd supervises the
packaged services.

- Each child leads its own process group, so that the terminal's Ctrl-C
  reaches only `up`, which stops them in order, and is told by the kernel to
  exit if `up` dies without cleaning up (PR_SET_PDEATHSIG).
- The essential children (the Ray head; the neurons of --static) end the
  stack when one exits: what they hold (engines, the cluster) does not come
  back in seconds.
- cortex is started again when it dies, with the same command line: the
  same ports, the same controller or neurons, the replicas left serving.
  `RestartPolicy` decides, as neuraxis-cortex.service's Restart=always and
  RestartPreventExitStatus=2 do, within a bounded rate (systemd's
  StartLimitBurst) so that a cortex that keeps dying ends the stack.
- Ctrl-C or SIGTERM stops everything (`run_until_stopped`).

Nothing here knows the run modes; they give the commands (embedded_ray.py,
embedded_static.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import IO, Generic, Protocol, TypeVar

from axon.process import die_with_parent
from neuraxis.console import error, say, warn

READY_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 40.0
# How often the children are looked at (and, while cortex starts, /readyz).
POLL_S = 0.5
# The CLI's exit status for bad settings: a restart would not fix them.
CONFIG_ERROR = 2
# At most this many restarts of cortex within RESTART_INTERVAL_S; one more
# exit ends the stack.
RESTART_BURST = 3
RESTART_INTERVAL_S = 60.0


def spawn(
    args: list[str], env: dict[str, str] | None = None, out: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    """`neuraxis ARGS` as a supervised child (its output to `out`, or to
    this terminal)."""
    return subprocess.Popen(
        [sys.executable, "-m", "neuraxis.cli", *args],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT if out else None,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


def reap(child: subprocess.Popen[bytes]) -> None:
    """What is left of a dead child's process group goes at once: with its
    leader gone, nothing in it serves."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def http_ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass(frozen=True)
class Verdict:
    restart: bool
    reason: str


class RestartPolicy:
    """Whether a cortex that exited with `code` is started again.

    Once it has served, any exit but a configuration error's (2) restarts
    it, as Restart=always does; before that, only a death by a signal (an
    abort in native gRPC code during start-up has been seen under load):
    an exit with a status while starting is its settings' doing. In both
    cases at most `burst` restarts within `interval_s`."""

    def __init__(self, burst: int = RESTART_BURST, interval_s: float = RESTART_INTERVAL_S) -> None:
        self._burst = burst
        self._interval_s = interval_s
        self._served = False
        self._restarts: deque[float] = deque()

    def served(self) -> None:
        self._served = True

    def decide(self, code: int, now: float) -> Verdict:
        if code == CONFIG_ERROR:
            return Verdict(False, "cortex exited with code 2, a configuration error")
        if code >= 0 and not self._served:
            return Verdict(False, f"cortex exited during start-up (code {code})")
        while self._restarts and now - self._restarts[0] >= self._interval_s:
            self._restarts.popleft()
        if len(self._restarts) >= self._burst:
            return Verdict(
                False,
                f"cortex exited {self._burst + 1} times within {self._interval_s:.0f} s "
                f"(code {code} the last time)",
            )
        self._restarts.append(now)
        return Verdict(
            True,
            f"cortex exited (code {code}); starting it again on the same ports "
            f"(restart {len(self._restarts)} of at most {self._burst} "
            f"within {self._interval_s:.0f} s)",
        )


class Child(Protocol):
    def poll(self) -> int | None: ...


C = TypeVar("C", bound=Child)


class Supervisor(Generic[C]):
    """The essential children and cortex of one `up`, in the order they
    started. `start_cortex` starts a cortex (the same command every time),
    `ready` says whether cortex answers /readyz, `reap` cleans up after a
    dead cortex."""

    def __init__(
        self,
        start_cortex: Callable[[], C],
        ready: Callable[[], bool],
        reap: Callable[[C], None],
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._start_cortex = start_cortex
        self._ready = ready
        self._reap = reap
        self._policy = policy or RestartPolicy()
        self._clock = clock
        self._sleep = sleep
        self._essential: list[tuple[str, C]] = []
        self._cortex: C | None = None
        self._restarted_at: float | None = None

    def add(self, name: str, child: C) -> None:
        """An essential child: when it exits, the stack ends."""
        self._essential.append((name, child))

    def start_cortex(self) -> None:
        self._cortex = self._start_cortex()

    def children(self) -> list[C]:
        """Every child, in the order they started (stop them in reverse)."""
        essential = [child for _, child in self._essential]
        return essential if self._cortex is None else [*essential, self._cortex]

    def wait_ready(
        self, timeout_s: float = READY_TIMEOUT_S, tick: Callable[[], None] = lambda: None
    ) -> None:
        """Until cortex first answers ready (`tick` between looks); a
        SystemExit with the reason when the stack ends first."""
        deadline = self._clock() + timeout_s
        while self._clock() < deadline:
            tick()
            ended = self._look(starting=True)
            if ended is not None:
                raise SystemExit(f"neuraxis: {ended}")
            if self._ready():
                self._policy.served()
                self._restarted_at = None
                return
            self._sleep(POLL_S)
        raise SystemExit(f"neuraxis: not ready after {timeout_s:.0f} s")

    def serve(self) -> int:
        """Watch the children, starting cortex again when it dies, until the
        stack ends: then say why and return 1."""
        while True:
            ended = self._look(starting=False)
            if ended is not None:
                error(f"{ended}; stopping")
                return 1
            if self._restarted_at is not None and self._ready():
                say(f"cortex ready again in {self._clock() - self._restarted_at:.1f} s")
                self._restarted_at = None
            self._sleep(POLL_S)

    def _look(self, starting: bool) -> str | None:
        """Why the stack ends, or None; a dead cortex is started again here
        when the policy allows."""
        for name, child in self._essential:
            code = child.poll()
            if code is not None:
                return f"{name} exited{' during start-up' if starting else ''} (code {code})"
        if self._cortex is None:
            return None
        code = self._cortex.poll()
        if code is None:
            return None
        now = self._clock()
        verdict = self._policy.decide(code, now)
        if not verdict.restart:
            return verdict.reason
        warn(verdict.reason)
        self._reap(self._cortex)
        self._cortex = self._start_cortex()
        self._restarted_at = now
        return None


def supervise_cortex(
    command: list[str], env: dict[str, str], base_url: str
) -> Supervisor[subprocess.Popen[bytes]]:
    """A supervisor whose cortex is `neuraxis COMMAND` in `env`, ready once
    base_url/readyz answers."""
    return Supervisor(lambda: spawn(command, env), lambda: http_ready(base_url), reap)


class StopRequestedError(Exception):
    """Ctrl-C or SIGTERM arrived."""


def stop_on_signals() -> None:
    """From now on Ctrl-C and SIGTERM raise StopRequestedError, wherever
    `up` is, so that `run_until_stopped` stops the children in order."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise StopRequestedError()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)


def run_until_stopped(run: Callable[[], int], stop: Callable[[], None]) -> int:
    """`run` until it returns or Ctrl-C / SIGTERM arrives; then `stop`, with
    further signals ignored so that the stopping is not cut short."""
    try:
        return run()
    except StopRequestedError:
        say("stopping")
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop()
        say("stopped")
