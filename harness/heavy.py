"""The machine's heavy-run lock, and the process that serves a URL.

Runs that start real servers take /tmp/neuraxis-heavy.lock so that only one
such run uses the shared cores at a time; a benchmark of several runs takes
it per run (`held`), so other work gets the machine in between.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psutil


@contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """The machine's heavy-run lock for one run (none without --lock)."""
    if lock is None:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def listening_pid(base_url: str) -> int | None:
    """The process accepting connections at base_url (cortex, for a stack
    that was started elsewhere)."""
    port = urlsplit(base_url).port
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return int(conn.pid) if conn.pid is not None else None
    return None
