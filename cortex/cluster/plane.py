"""The control plane as this cortex sees it: whether the controller and the
Ray head answer, how old the endpoint table it routes on is, and how many
times the controller came back (and what it adopted then).

`ControlPlane` is plain state with the transitions the table follower
(client.follow_table) and the head watch report to it; each transition is
logged once (a head lost is a warning, its return is info), exported as
metrics (cortex/metrics.py) and sent to the controller with cortex's report
(so `neuraxis status` shows it). The table's age is the time since the
controller last confirmed the table: a long poll answers at least every
POLL_S while the controller is there, so an age far above it means cortex is
routing on a table nobody is keeping current.

`watch_head` probes the head's GCS port with a TCP connection: no Ray call
(a Ray call to a lost GCS blocks for a minute), and a refused or timed-out
connection is exactly what a lost head looks like from here.

No Ray here. What does not live here: following the table (client.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cortex import metrics

log = logging.getLogger("neuraxis.cortex")

# How often the head is probed and the gauges refreshed.
WATCH_S = 2.0
# How long one probe of the head may take.
PROBE_TIMEOUT_S = 2.0


@dataclass
class ControlPlane:
    head: str  # the Ray head's host:port (the metrics' label)
    clock: Callable[[], float] = time.monotonic
    controller_up: bool = False
    head_up: bool = False
    epoch: str | None = None
    # When the controller last answered a poll of the table (clock time).
    confirmed_at: float | None = None
    # Controllers that replaced the one this cortex followed before, and the
    # replicas they adopted (from each new controller's table).
    controller_restarts: int = 0
    adopted: int = 0
    _head_known: bool = field(default=False, repr=False)

    def table_confirmed(self, epoch: str | None, adopted: int) -> None:
        """The controller answered a poll with its table (`epoch`; it
        adopted `adopted` replicas when it started)."""
        self.confirmed_at = self.clock()
        if not self.controller_up:
            self.controller_up = True
            metrics.set_controller_up(self.head, True)
        if epoch is None or epoch == self.epoch:
            return
        if self.epoch is not None:
            self.controller_restarts += 1
            self.adopted += adopted
            metrics.record_controller_restart(self.head, adopted)
            log.info("a new controller (epoch %s) adopted %d replicas", epoch[:8], adopted)
        self.epoch = epoch

    def controller_lost(self) -> None:
        if self.controller_up:
            self.controller_up = False
            metrics.set_controller_up(self.head, False)

    def __post_init__(self) -> None:
        metrics.touch_control_plane(self.head)

    def head_probed(self, up: bool) -> None:
        if up == self.head_up and self._head_known:
            return
        if not up:
            log.warning(
                "the Ray head at %s does not answer; routing on the last table "
                "(no replica can be placed or replaced until it is back)",
                self.head,
            )
        elif self._head_known:
            log.info("the Ray head at %s answers again", self.head)
        self.head_up, self._head_known = up, True
        metrics.set_head_up(self.head, up)

    def table_age_s(self) -> float | None:
        """Seconds since the controller last confirmed the table (None: never)."""
        if self.confirmed_at is None:
            return None
        return max(0.0, self.clock() - self.confirmed_at)

    def refresh(self) -> None:
        """Export the table's age (it grows between events)."""
        age = self.table_age_s()
        if age is not None:
            metrics.set_table_age(self.head, age)


async def probe_tcp(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when host:port accepts a TCP connection within `timeout_s`."""
    host, _, port = address.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port)), timeout_s
        )
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def head_answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """probe_tcp for a caller without an event loop (`neuraxis status`: Ray
    takes minutes to give up on a head that is gone)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


async def watch_head(
    plane: ControlPlane,
    interval_s: float = WATCH_S,
    probe: Callable[[str], Awaitable[bool]] = probe_tcp,
) -> None:
    """Probe the head every `interval_s` and refresh the gauges, for ever."""
    while True:
        plane.head_probed(await probe(plane.head))
        plane.refresh()
        await asyncio.sleep(interval_s)
