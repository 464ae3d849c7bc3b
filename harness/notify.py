"""A datagram socket standing in for systemd's notify socket: a service
started with NOTIFY_SOCKET=<path> sends READY=1 (and the like) to it, as it
would to systemd under `Type=notify`."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from pathlib import Path


class NotifySocket:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[str] = []

    def wait_for(
        self,
        state: str,
        alive: Callable[[], bool],
        timeout: float,
        log: Callable[[], str] = str,
    ) -> float:
        """Seconds until `state` arrives; fails if the service dies first or
        the time runs out (`log()`: what to show then)."""
        started = time.monotonic()
        while state not in self.messages:
            left = timeout - (time.monotonic() - started)
            if left <= 0 or not alive():
                raise AssertionError(f"no {state}: {self.messages}\n{log()}")
            self.sock.settimeout(min(left, 1.0))
            with contextlib.suppress(TimeoutError):
                self.messages += self.sock.recv(4096).decode().splitlines()
        return time.monotonic() - started

    def close(self) -> None:
        self.sock.close()
