"""While `neuraxis up` starts on Ray: the controller's status, read as a Ray
driver with the run's token, turned into progress lines (progress.py) and
printed as the replicas load."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable

from neuraxis.console import say, warn
from neuraxis.progress import Level, StartProgress


class ReplicaWatch:
    """Reads the controller's status at most once a second and says what
    changed; `close` leaves Ray."""

    def __init__(self, address: str, token: str) -> None:
        self._address = address
        self._token = token
        self._progress = StartProgress()
        self._connected = False
        self._next = 0.0

    def poll(self, now: bool = False) -> None:
        if not now and time.monotonic() < self._next:
            return
        self._next = time.monotonic() + 1.0
        # Ray reads its authentication settings when it is first imported.
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = self._token
        from ray.exceptions import RayError

        from cortex.cluster.client import ClusterError, connect, status

        try:
            if not self._connected:
                self._connect(connect)
            current = status(timeout_s=5)
        except (ClusterError, RayError):
            return  # cortex has not started the controller yet
        for line in self._progress.update(current, time.monotonic()):
            (warn if line.level is Level.WARNING else say)(line.text)

    def _connect(self, connect: Callable[[str], None]) -> None:
        # Ray's own handler would print its INFO lines ("Connecting to
        # existing Ray cluster") on the console.
        logging.getLogger("ray").setLevel(logging.WARNING)
        # ray.init puts a SIGTERM handler of its own (sys.exit) in place of
        # the one that stops the children in order.
        handler = signal.getsignal(signal.SIGTERM)
        try:
            connect(self._address)
            self._connected = True
        finally:
            signal.signal(signal.SIGTERM, handler)

    def close(self) -> None:
        """Leave Ray before it stops, so that the driver has nothing to say."""
        if self._connected:
            import ray

            ray.shutdown()
            self._connected = False
