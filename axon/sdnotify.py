"""systemd's service notification protocol (sd_notify(3)), without libsystemd.

A service of `Type=notify` tells systemd when it can do its job (`READY=1`),
that it is stopping (`STOPPING=1`), what it is doing (`STATUS=...`) and, with
`WatchdogSec=`, that its event loop is alive (`WATCHDOG=1`). systemd passes
the socket in NOTIFY_SOCKET (a path, or an abstract name starting with "@")
and the watchdog period in WATCHDOG_USEC. Outside systemd nothing is set and
every call here does nothing, so the same code runs under `neuraxis up`.

What lives here: sending a notification and reading the watchdog period.
When each service is ready is decided by the service (cortex/readiness.py,
neuraxis/head.py, neuron/agent.py).
"""

from __future__ import annotations

import os
import socket


def notify(*states: str) -> bool:
    """Send `states` (e.g. "READY=1", "STATUS=serving") to systemd; False
    when not running under a notify socket or when the send fails (a lost
    notification must never stop the service)."""
    target = os.environ.get("NOTIFY_SOCKET")
    if not target or not states:
        return False
    return send(target, "\n".join(states).encode())


def send(target: str, message: bytes) -> bool:
    """One datagram to the notify socket `target` (a path, or "@name")."""
    address = "\0" + target[1:] if target.startswith("@") else target
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message)
    except OSError:
        return False
    return True


def watchdog_interval_s(parent_ok: bool = False) -> float | None:
    """How often to send WATCHDOG=1: half the period systemd gave (its own
    advice), or None without a watchdog for this process. `parent_ok`: the
    watchdog systemd set for this process's parent counts too (cortex's
    uvicorn workers, children of the service's main process)."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    ours = {str(os.getpid())} | ({str(os.getppid())} if parent_ok else set())
    if not usec or (pid and pid not in ours):
        return None
    try:
        period = int(usec)
    except ValueError:
        return None
    return period / 2e6 if period > 0 else None
