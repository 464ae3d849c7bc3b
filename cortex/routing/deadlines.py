"""A request's deadlines: until its first token, between two tokens (idle),
and in total.

The total deadline is fixed when the request arrives and every attempt,
retries included, lives within it (a retry does not start the clock again).
The first-token deadline runs per attempt (a retry on another neuron gets
its own), the idle one from each message to the next. `wait` says how long
the pool may wait for the next message and which deadline that is; the
arithmetic is plain (a clock passed in); `Watchdog` enforces it on the
waits of one attempt, on the event loop's timers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pydantic import Field, PositiveFloat

from axon.errors import DeadlineExceededError
from axon.settings import SettingsGroup
from cortex.routing.timer import Timer


class Deadlines(SettingsGroup):
    """How long a generation may take."""

    first_token_s: PositiveFloat = Field(
        120.0,
        description="deadline for a neuron's first message of an attempt, queueing included; "
        "past it the attempt fails and, nothing having been sent, is retried elsewhere (s)",
    )
    idle_s: PositiveFloat = Field(
        60.0,
        description="deadline between two messages of a stream once it has started (long "
        "enough for output held back, e.g. a tool call's arguments); past it the stream ends "
        "with its terminal error event (s)",
    )
    total_s: PositiveFloat = Field(
        600.0,
        description="total deadline of one generation, retries included (a retry keeps the "
        "original deadline), in seconds",
    )


class RequestDeadline:
    def __init__(self, deadlines: Deadlines, clock: Callable[[], float]) -> None:
        self._deadlines = deadlines
        self._clock = clock
        self._end = clock() + deadlines.total_s

    def remaining(self) -> float:
        """Seconds left of the total deadline (0 once it has passed)."""
        return max(0.0, self._end - self._clock())

    def wait(self, started: bool) -> tuple[float, str]:
        """How long to wait for the next message of an attempt (`started`:
        it has sent one already), and the name of the deadline that bounds it."""
        if started:
            phase, seconds = "idle", self._deadlines.idle_s
        else:
            phase, seconds = "first token", self._deadlines.first_token_s
        remaining = self.remaining()
        if remaining <= seconds:
            return remaining, "total"
        return seconds, phase

    def exceeded(self, phase: str) -> DeadlineExceededError:
        seconds = {
            "first token": self._deadlines.first_token_s,
            "idle": self._deadlines.idle_s,
            "total": self._deadlines.total_s,
        }[phase]
        return DeadlineExceededError(
            f"The model server did not answer in time (the {phase} deadline of {seconds:g} s "
            "passed)."
        )


class Watchdog:
    """Enforces the deadlines on one attempt's waits for its next message,
    and lets the pool abandon the attempt (`neuron_down`).

    One timer per attempt, re-armed only when it fires: each message costs
    a clock read, not a timer, which matters at thousands of tokens a
    second. When a deadline passes while the attempt is waiting, the task
    is cancelled at that wait and `expired` tells `interrupted` why; a
    cancellation that is not the watchdog's goes on as it is.
    """

    def __init__(self, deadline: RequestDeadline) -> None:
        self._deadline = deadline
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._waiting = False
        self._started = False
        self._since = self._loop.time()
        self.expired: str | None = None  # the deadline that passed, or "neuron down"
        self._timer = Timer(self._loop)

    def waiting(self) -> None:
        """The attempt starts waiting for its next message (in this task:
        a stream may be read by one task, then by another)."""
        self._task = asyncio.current_task()
        self._since = self._loop.time()
        self._waiting = True
        if not self._timer.armed:
            self._arm()

    def received(self) -> None:
        """A message came (or the wait ended otherwise)."""
        self._waiting = False

    def started(self) -> None:
        """The first message came: from now on the idle deadline applies,
        armed afresh at the next wait."""
        if not self._started:
            self._started = True
            self.stop()

    def stop(self) -> None:
        self._timer.cancel()

    def neuron_down(self) -> None:
        """The health poll found the neuron gone: end the wait now."""
        self._fire("neuron down")

    def interrupted(self) -> bool:
        """Whether a cancellation just caught was the watchdog's (then it is
        taken back, and `expired` says why)."""
        if self.expired is None or self._task is None:
            return False
        return self._task.uncancel() == 0

    def _arm(self) -> None:
        seconds, _ = self._deadline.wait(self._started)
        self._timer.arm_at(self._since + seconds, self._check)

    def _check(self) -> None:
        if not self._waiting:
            return  # armed again at the next wait
        seconds, phase = self._deadline.wait(self._started)
        if self._loop.time() - self._since >= seconds:
            self._fire(phase)
        else:
            self._arm()

    def _fire(self, reason: str) -> None:
        if self._waiting and self.expired is None and self._task is not None:
            self.expired = reason
            self._task.cancel()
