"""The Files and Batches store: uploaded files, batches and each batch
line's result, on either backend (batch_db.py: SQLite or PostgreSQL; the SQL
is written once, here).

- A file is a row (its tenant, purpose, name, size in bytes and lines) and
  its content in a table of chunks (`file_chunks`, one row per chunk of at
  most the writer's chunk size, numbered from 0), so that neither an upload
  nor a download ever holds the whole file. A file being uploaded has status
  "uploading" and reads as missing until `end_file`.
- A batch is a row: the Batch object as the client sees it (JSON), its
  status apart for queries, the principal it runs for, and while it runs a
  lease (owner, lease_until) as background responses have.
- A line's result is a row keyed by (batch, line number), written once
  (`record` never replaces one): a line that completes is durable before it
  is counted, and a batch resumed elsewhere skips it, so no custom_id
  completes twice. The output and error files are built from these rows
  when the batch ends.

Files and batches are purged `ttl_days` after they were created, as stored
responses are (cortex/api/batches/runner.py holds the job's lease).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from cortex.store.batch_db import Db, Row

# The statuses of a batch that a runner still has work on.
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
UPLOADING, PROCESSED = "uploading", "processed"

_FILE_COLUMNS = "id, tenant, created_at, status, purpose, filename, bytes, lines"
_BATCH_COLUMNS = "id, tenant, created_at, status, batch, principal, owner, lease_until"
_ACTIVE_ROW = f"status IN ({', '.join(repr(s) for s in ACTIVE)})"


@dataclass(frozen=True)
class StoredFile:
    id: str
    tenant: str
    created_at: int
    status: str
    purpose: str
    filename: str
    bytes: int = 0
    lines: int = 0

    @classmethod
    def from_row(cls, row: Row) -> StoredFile:
        return cls(row[0], row[1], int(row[2]), row[3], row[4], row[5], int(row[6]), int(row[7]))


@dataclass(frozen=True)
class StoredBatch:
    id: str
    tenant: str
    created_at: int
    batch: dict[str, Any]  # the Batch object, as the client sees it
    principal: dict[str, Any]  # whom its lines run for (cortex/api/batches/principal.py)
    owner: str = ""  # the instance running it (host:port/pid)
    lease_until: float = 0.0

    @property
    def status(self) -> str:
        return str(self.batch["status"])

    @classmethod
    def from_row(cls, row: Row) -> StoredBatch:
        return cls(
            id=row[0],
            tenant=row[1],
            created_at=int(row[2]),
            batch=json.loads(row[4]),
            principal=json.loads(row[5]),
            owner=row[6],
            lease_until=float(row[7]),
        )


class BatchStore:
    def __init__(self, db: Db) -> None:
        self._db = db
        p = db.prefix
        self._files, self._chunks = f"{p}files", f"{p}file_chunks"
        self._batches, self._results = f"{p}batches", f"{p}batch_results"

    @property
    def backend(self) -> str:
        return self._db.backend

    # Files.

    async def begin_file(self, file: StoredFile) -> None:
        """A new file's row, "uploading" (invisible) until `end_file`."""
        await self._db.execute(
            f"INSERT INTO {self._files} ({_FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            file.id,
            file.tenant,
            file.created_at,
            UPLOADING,
            file.purpose,
            file.filename,
            0,
            0,
        )

    async def add_chunk(self, file_id: str, seq: int, data: bytes) -> None:
        await self._db.execute(
            f"INSERT INTO {self._chunks} (file_id, seq, data) VALUES (?, ?, ?)", file_id, seq, data
        )

    async def end_file(self, file_id: str, size: int, lines: int) -> None:
        await self._db.execute(
            f"UPDATE {self._files} SET status = ?, bytes = ?, lines = ? WHERE id = ?",
            PROCESSED,
            size,
            lines,
            file_id,
        )

    async def get_file(self, file_id: str) -> StoredFile | None:
        rows = await self._db.fetch(
            f"SELECT {_FILE_COLUMNS} FROM {self._files} WHERE id = ? AND status = ?",
            file_id,
            PROCESSED,
        )
        return StoredFile.from_row(rows[0]) if rows else None

    async def list_files(
        self, tenant: str, purpose: str | None, limit: int, after: StoredFile | None, desc: bool
    ) -> list[StoredFile]:
        """`tenant`'s files by creation (then id), from after `after`."""
        where, args = "tenant = ? AND status = ?", list[Any]([tenant, PROCESSED])
        if purpose is not None:
            where += " AND purpose = ?"
            args.append(purpose)
        if after is not None:
            where += f" AND (created_at, id) {'<' if desc else '>'} (?, ?)"
            args += [after.created_at, after.id]
        order = "DESC" if desc else "ASC"
        rows = await self._db.fetch(
            f"SELECT {_FILE_COLUMNS} FROM {self._files} WHERE {where} "
            f"ORDER BY created_at {order}, id {order} LIMIT ?",
            *args,
            limit,
        )
        return [StoredFile.from_row(r) for r in rows]

    async def chunks(self, file_id: str) -> AsyncIterator[bytes]:
        """The file's content, one chunk per query: never the whole file."""
        seq = 0
        while True:
            rows = await self._db.fetch(
                f"SELECT data FROM {self._chunks} WHERE file_id = ? AND seq = ?", file_id, seq
            )
            if not rows:
                return
            yield bytes(rows[0][0])
            seq += 1

    async def delete_file(self, file_id: str) -> bool:
        deleted = await self._db.execute(f"DELETE FROM {self._files} WHERE id = ?", file_id)
        await self._db.execute(f"DELETE FROM {self._chunks} WHERE file_id = ?", file_id)
        return deleted > 0

    # Batches.

    async def create_batch(self, record: StoredBatch) -> None:
        await self._db.execute(
            f"INSERT INTO {self._batches} ({_BATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            record.id,
            record.tenant,
            record.created_at,
            record.status,
            json.dumps(record.batch),
            json.dumps(record.principal),
            record.owner,
            record.lease_until,
        )

    async def get_batch(self, batch_id: str) -> StoredBatch | None:
        rows = await self._db.fetch(
            f"SELECT {_BATCH_COLUMNS} FROM {self._batches} WHERE id = ?", batch_id
        )
        return StoredBatch.from_row(rows[0]) if rows else None

    async def list_batches(
        self, tenant: str, limit: int, after: StoredBatch | None
    ) -> list[StoredBatch]:
        """`tenant`'s batches, newest first, from after `after`."""
        where, args = "tenant = ?", list[Any]([tenant])
        if after is not None:
            where += " AND (created_at, id) < (?, ?)"
            args += [after.created_at, after.id]
        rows = await self._db.fetch(
            f"SELECT {_BATCH_COLUMNS} FROM {self._batches} WHERE {where} "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            *args,
            limit,
        )
        return [StoredBatch.from_row(r) for r in rows]

    async def swap(self, batch_id: str, expected: str, batch: dict[str, Any]) -> bool:
        """Replace the Batch object if its status is still `expected` (so a
        runner's progress never overwrites a cancel made meanwhile)."""
        changed = await self._db.execute(
            f"UPDATE {self._batches} SET status = ?, batch = ? WHERE id = ? AND status = ?",
            batch["status"],
            json.dumps(batch),
            batch_id,
            expected,
        )
        return changed > 0

    async def claim(self, owner: str, now: float, until: float) -> StoredBatch | None:
        """Take the oldest active batch nobody holds (never run, or its
        lease lapsed): it is `owner`'s until `until`."""
        rows = await self._db.fetch(
            f"UPDATE {self._batches} SET owner = ?, lease_until = ? WHERE id = "
            f"(SELECT id FROM {self._batches} WHERE {_ACTIVE_ROW} AND lease_until < ? "
            "ORDER BY created_at, id LIMIT 1) "
            f"AND {_ACTIVE_ROW} AND lease_until < ? RETURNING {_BATCH_COLUMNS}",
            owner,
            until,
            now,
            now,
        )
        return StoredBatch.from_row(rows[0]) if rows else None

    async def renew(self, owner: str, ids: Sequence[str], until: float) -> dict[str, str]:
        """Extend `owner`'s leases of `ids`; each one it still holds, with
        its status (a cancel made elsewhere shows here)."""
        if not ids:
            return {}
        marks = ", ".join("?" * len(ids))
        rows = await self._db.fetch(
            f"UPDATE {self._batches} SET lease_until = ? WHERE owner = ? AND id IN ({marks}) "
            "RETURNING id, status",
            until,
            owner,
            *ids,
        )
        return {row[0]: row[1] for row in rows}

    async def held_under(self, prefix: str) -> list[tuple[str, str]]:
        """(id, owner) of the active batches whose owner starts with `prefix`
        (the processes of one host:port)."""
        rows = await self._db.fetch(
            f"SELECT id, owner FROM {self._batches} WHERE {_ACTIVE_ROW} "
            "AND substr(owner, 1, ?) = ?",
            len(prefix),
            prefix,
        )
        return [(row[0], row[1]) for row in rows]

    async def release(self, batch_id: str, owner: str) -> None:
        """Let go of a batch that has ended (or that this owner stops)."""
        await self._db.execute(
            f"UPDATE {self._batches} SET owner = '', lease_until = 0 WHERE id = ? AND owner = ?",
            batch_id,
            owner,
        )

    # Line results.

    async def record(self, batch_id: str, line: int, ok: bool, body: str) -> bool:
        """Keep line `line`'s result (its output or error file line); False
        if it had one already, which stays."""
        changed = await self._db.execute(
            f"INSERT INTO {self._results} (batch_id, line, ok, body) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (batch_id, line) DO NOTHING",
            batch_id,
            line,
            int(ok),
            body,
        )
        return changed > 0

    async def done_lines(self, batch_id: str) -> set[int]:
        rows = await self._db.fetch(
            f"SELECT line FROM {self._results} WHERE batch_id = ?", batch_id
        )
        return {int(r[0]) for r in rows}

    async def counts(self, batch_id: str) -> tuple[int, int]:
        """(completed, failed) lines so far."""
        rows = await self._db.fetch(
            f"SELECT COALESCE(SUM(ok), 0), COUNT(*) FROM {self._results} WHERE batch_id = ?",
            batch_id,
        )
        ok, total = int(rows[0][0]), int(rows[0][1])
        return ok, total - ok

    async def results(self, batch_id: str, ok: bool, page: int = 500) -> AsyncIterator[str]:
        """The result lines of one kind in line order, `page` rows a query."""
        after = -1
        while True:
            rows = await self._db.fetch(
                f"SELECT line, body FROM {self._results} WHERE batch_id = ? AND ok = ? "
                "AND line > ? ORDER BY line LIMIT ?",
                batch_id,
                int(ok),
                after,
                page,
            )
            for row in rows:
                yield row[1]
            if len(rows) < page:
                return
            after = int(rows[-1][0])

    # Retention.

    async def purge(self, before: int, limit: int = 10_000) -> int:
        """Delete the files and batches created before `before` (with their
        chunks and results), `limit` rows of each a statement; how many
        files and batches."""
        total = 0
        for table, children, key in (
            (self._files, self._chunks, "file_id"),
            (self._batches, self._results, "batch_id"),
        ):
            while True:
                ids = [
                    r[0]
                    for r in await self._db.fetch(
                        f"SELECT id FROM {table} WHERE created_at < ? LIMIT ?", before, limit
                    )
                ]
                for chunk_start in range(0, len(ids), 500):
                    part = ids[chunk_start : chunk_start + 500]
                    marks = ", ".join("?" * len(part))
                    await self._db.execute(
                        f"DELETE FROM {children} WHERE {key} IN ({marks})", *part
                    )
                    await self._db.execute(f"DELETE FROM {table} WHERE id IN ({marks})", *part)
                total += len(ids)
                if len(ids) < limit:
                    break
        return total

    async def close(self) -> None:
        await self._db.close()
