"""How the key and tenant stores (sqlite_keys.py, sqlite_tenants.py) write
their SQLite file: a record durably, several statements as one transaction.

The connection runs with synchronous=NORMAL (in WAL mode a power cut may
lose the last commits, never corrupt the file); a record whose change was
acknowledged must survive a crash (a key, a revocation, a tenant's row), so
it is written with synchronous=FULL."""

from __future__ import annotations

import sqlite3


def durably(db: sqlite3.Connection, sql: str, args: tuple[object, ...]) -> int:
    """Run `sql` with synchronous=FULL; the rows it changed."""
    db.execute("PRAGMA synchronous=FULL")
    try:
        return db.execute(sql, args).rowcount
    finally:
        db.execute("PRAGMA synchronous=NORMAL")


class Immediate:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on an error): the write lock is
    taken before the read, so no other writer can slip in between."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")
