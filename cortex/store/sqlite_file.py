"""The state directory's SQLite file, opened as every store opens it, and
`Serialized`, the one connection the key and tenant stores each run their
statements on (the Responses and batch stores: `connect_durable` and
`serialized`).

A new file is made readable and writable by its owner only (0600): it
holds API key hashes, stored prompts and answers. systemd's
`StateDirectoryMode=` covers the packaged service; run by hand (`neuraxis
up`, `neuraxis keys`), the umask's 0644 let every local user read them.
SQLite gives its -wal and -shm files the database's own mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

MEMORY = ":memory:"


def connect(path: Path) -> sqlite3.Connection:
    """A connection to `path` (made 0600 when new), in autocommit mode,
    usable from the stores' worker threads."""
    if str(path) != MEMORY:
        path.parent.mkdir(parents=True, exist_ok=True)
        _create_private(path)
    return sqlite3.connect(path, check_same_thread=False, isolation_level=None)


def _create_private(path: Path) -> None:
    """Make `path` 0600 if it does not exist; an existing file is left
    alone, not even opened: closing a descriptor of a file drops every POSIX
    lock this process holds on it, SQLite's locks of another connection
    included (cortex's two stores share the file)."""
    if path.exists():
        return
    with contextlib.suppress(FileExistsError):  # made meanwhile: by SQLite, as we would
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))


def connect_durable(path: Path) -> sqlite3.Connection:
    """`connect`, in WAL mode with synchronous=FULL (a commit survives a
    crash of the process or the machine: the Responses and batch stores),
    waiting up to 10 s for another process's write."""
    db = connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA busy_timeout=10000")
    return db


async def serialized(lock: asyncio.Lock, work: Callable[[], T]) -> T:
    """`work` on a connection, in a worker thread, one at a time under
    `lock`. A cancelled caller still waits for its statement to finish
    before it lets go of the connection: closing it under a running
    statement crashes the process."""
    async with lock:
        running = asyncio.ensure_future(asyncio.to_thread(work))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            await asyncio.wait({running})
            raise


class Serialized:
    """A connection (WAL, synchronous=NORMAL, `schema` made) used by one
    statement at a time, off the event loop."""

    def __init__(self, path: Path, schema: str, busy_timeout_ms: int = 10_000) -> None:
        self._db = connect(path)
        self._db.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(schema)
        self._lock = asyncio.Lock()
        self._closed = False

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        async with self._lock:
            return await asyncio.to_thread(work, self._db)

    async def close(self) -> None:
        """Close the connection; harmless twice."""
        if not self._closed:
            self._closed = True
            await self.run(lambda db: db.close())
