"""Passing uvicorn workers' systemd notifications on from the main process.

With `--workers N` uvicorn's supervisor is the service's main process and
the workers, which know when cortex is ready and run the event loops the
watchdog watches, are its children. systemd would take their READY=1 and
WATCHDOG=1 only with `NotifyAccess=all`, which also lets any child change
the service's state (and costs the unit exposure score). Instead the main
process hands the workers a socket of its own as NOTIFY_SOCKET and sends
what arrives there on to systemd itself, so the unit keeps the default
`NotifyAccess=main`.
"""

from __future__ import annotations

import logging
import socket
import tempfile
import threading
from pathlib import Path

from axon.sdnotify import send

log = logging.getLogger("neuraxis.cortex")


class NotifyRelay:
    def __init__(self, target: str) -> None:
        """`target`: systemd's NOTIFY_SOCKET, which the workers will not see."""
        self._target = target
        self.path = Path(tempfile.mkdtemp(prefix="neuraxis-notify-")) / "notify"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._sock.bind(str(self.path))
        self._thread = threading.Thread(target=self._run, name="notify-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._sock.close()
        self.path.unlink(missing_ok=True)
        self.path.parent.rmdir()

    def _run(self) -> None:
        while True:
            try:
                message = self._sock.recv(4096)
            except OSError:
                return  # closed
            if not send(self._target, message):
                log.debug("could not pass a notification on to systemd")
