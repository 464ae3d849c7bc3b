"""`make test` as two pytest runs side by side (tests/conftest.py's `lane_of`
picks a test's lane): "stack", the tests on the session's real stack
(`neuraxis up` with vLLM: the `stack` fixture) and those marked
`lane("stack")`; "rest", every other. Much of a lane's time is waiting
(engines loading, Ray nodes joining, streams, deadlines), which the other
lane fills; each lane starts the session fixtures it uses, once. (Four
lanes, tried on 2026-11-28, kept both cores busy and ended no sooner: 25 min
for the longest against 26, with the timing tests failing more.)

Each lane writes to a file of its own, printed whole when the lane ends
(interleaved output would be unreadable); the exit status is the worst
lane's. A test marked `quiet` (a timing a busy machine would spoil) runs
alone: the other lane waits between two tests meanwhile (`lane_turn`;
consecutive quiet tests share one such turn, `Turns`).
Ctrl-C or SIGTERM interrupts both lanes the way Ctrl-C interrupts pytest,
so that their fixtures stop what they started.

    python -m harness.lanes [PYTEST ARGS...]
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from harness.ports import PORTS_ENV, share
from harness.procs import REPO

LANES = ("stack", "rest")
# The lock file whose turns `lane_turn` takes (set by `main` for both lanes).
LOCK_ENV = "NEURAXIS_LANES_LOCK"


@dataclass
class Lane:
    name: str
    popen: subprocess.Popen[bytes]
    output: Path
    started: float
    code: int | None = None
    seconds: float = 0.0


@contextmanager
def lane_turn(quiet: bool) -> Iterator[None]:
    """A test's turn: shared with the other lane's current test, or, for a
    test whose figures are timings that a busy neighbour would spoil
    (`quiet`), alone, while the other lane waits between two tests. A
    turnstile keeps a waiting quiet test from being starved by the other
    lane's next turns. Nothing outside make test's lanes."""
    path = os.environ.get(LOCK_ENV)
    if not path:
        yield
        return
    with open(f"{path}.turnstile", "a") as turnstile, open(path, "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
        if not quiet:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)


class Turns:
    """One lane's turns, test after test. A quiet test followed by another
    quiet test keeps its turn alone for it: each new quiet turn waits for the
    other lane's current test, and tests/faults' dozen quiet tests, one turn
    each, waited behind the other lane's benchmark smokes of a minute."""

    def __init__(self) -> None:
        self._kept: ExitStack | None = None  # the quiet turn kept for the next test

    @contextmanager
    def turn(self, quiet: bool, next_quiet: bool) -> Iterator[None]:
        """The turn of a test that is `quiet` or not, knowing whether the
        lane's next test is."""
        if self._kept is not None:
            held, self._kept = self._kept, None
        else:
            held = ExitStack()
            held.enter_context(lane_turn(quiet))
        try:
            yield
        finally:
            if quiet and next_quiet:
                self._kept = held
            else:
                held.close()


def start(name: str, args: list[str], out_dir: Path) -> Lane:
    output = out_dir / f"lane-{name}.log"
    # A temporary directory of its own: two pytest runs numbering theirs
    # under /tmp/pytest-of-USER at once could clean up each other's.
    command = [sys.executable, "-m", "pytest", "--lane", name, "--basetemp", str(out_dir / name)]
    command += args
    env = {**os.environ, LOCK_ENV: str(out_dir / "turns.lock")}
    # Ports of its own: a port one lane is given and has not bound yet is
    # free to the other's draw.
    env[PORTS_ENV] = share(LANES.index(name), len(LANES))
    with open(output, "wb") as log:
        popen = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    return Lane(name, popen, output, time.monotonic())


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    out_dir = Path(tempfile.mkdtemp(prefix="neuraxis-lanes-"))
    lanes = [start(name, args, out_dir) for name in LANES]
    print(f"pytest in {len(lanes)} lanes ({', '.join(LANES)}); output in {out_dir}", flush=True)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for lane in lanes:
            if lane.popen.poll() is None:
                lane.popen.send_signal(signal.SIGINT)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    running = list(lanes)
    while running:
        for lane in list(running):
            code = lane.popen.poll()
            if code is None:
                continue
            lane.code, lane.seconds = code, time.monotonic() - lane.started
            running.remove(lane)
            print(f"\n===== lane {lane.name}: exit {code} in {lane.seconds:.0f} s =====")
            print(lane.output.read_text(errors="replace"), flush=True)
        time.sleep(0.5)
    for lane in lanes:
        print(f"lane {lane.name}: exit {lane.code} in {lane.seconds:.0f} s")
    return outcome([lane.code or 0 for lane in lanes])


def outcome(codes: list[int]) -> int:
    """The run's exit status from the lanes': the first failure's; pytest's
    5 (no tests collected) in one lane is none, since a selection (-k, a
    path) may leave a lane empty, but it is when every lane is empty."""
    failed = [code for code in codes if code not in (0, 5)]
    if failed:
        return failed[0]
    return 0 if 0 in codes else 5


if __name__ == "__main__":
    sys.exit(main())
