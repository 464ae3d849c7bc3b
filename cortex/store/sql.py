"""The SQL both Responses backends (sqlite.py, postgres.py) speak alike:
they differ in the table's name and the placeholders' spelling only."""

from __future__ import annotations

from collections.abc import Sequence

from cortex.store.base import COLUMNS, DELETED, RUNNING

# A condition on a row: its response has not ended.
RUNNING_ROW = f"status IN ({', '.join(repr(s) for s in RUNNING)})"


def upsert(table: str, placeholders: Sequence[str]) -> str:
    """The statement that stores a record (its COLUMNS, one placeholder
    each): an upsert that never overwrites a deleted response's tombstone."""
    return (
        f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES ({', '.join(placeholders)}) "
        "ON CONFLICT (id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "id")
        + f" WHERE {table}.status != '{DELETED}'"
    )
