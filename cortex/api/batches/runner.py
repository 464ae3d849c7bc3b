"""The batch runner: every cortex process (each worker) takes batches from
the store under leases, as background responses are run, and runs them.

- `claim`: up to `max_running` active batches nobody holds (never started,
  or whose instance stopped renewing its lease) become this process's.
- `renew`: every third of `lease_s` the leases of its batches are renewed;
  one it no longer holds is stopped at once (nothing more is written), one
  cancelled elsewhere is cancelled here.
- A batch runs step by step through lifecycle.py's statuses: validate the
  input file (streamed), run its lines (streamed again, skipping the lines
  already done, at most `max_in_flight` at a time, each through the normal
  request path: line_run.py), then build the output and error files from
  the lines' results. A line's result is stored before it is counted, and
  stored once (store/batches.py), so a batch resumed after a crash, here or
  on another instance, runs no line twice to completion.
- Expiry: past `expires_at`, the lines not done fail with `batch_expired`
  and the batch ends `expired` with the files of what was done.
- Retention: the holder of the "purge-batches" job lease purges the files
  and batches older than `files.ttl_days`.

Each step's failure is logged and tried again at the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from axon.process import pid_alive
from cortex.api.batches import lifecycle
from cortex.api.batches.files import file_lines, write_file
from cortex.api.batches.line_run import LineResult
from cortex.api.batches.lines import (
    BatchLine,
    LineError,
    error_line,
    parse_line,
    refused_line,
    usage_of,
)
from cortex.api.batches.principal import from_json
from cortex.api.batches.settings import BatchSettings, FilesSettings
from cortex.api.upkeep_loop import run_steps, upkeep_loop
from cortex.auth.principal import Principal
from cortex.routing.timer import set_within
from cortex.store.batches import BatchStore, StoredBatch, StoredFile

log = logging.getLogger("neuraxis.cortex")

RunLine = Callable[[str, Principal, BatchLine], Awaitable[LineResult]]
Claim = Callable[[str, str, float, float], Awaitable[bool]]
PURGE_JOB = "purge-batches"
_DAY_S = 86_400
# How often a running batch's request_counts are written (s).
PROGRESS_S = 1.0
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."


class BatchRunner:
    def __init__(
        self,
        store: BatchStore,
        run_line: RunLine,
        instance: str,
        settings: BatchSettings,
        files: FilesSettings,
        *,
        purge_claim: Claim,
        purge_interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store, self._run_line, self.instance = store, run_line, instance
        self._settings, self._files, self._clock = settings, files, clock
        self._purge_claim, self._purge_interval_s = purge_claim, purge_interval_s
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._stops: dict[str, asyncio.Event] = {}  # set: cancel the batch

    async def renew(self) -> None:
        ids = list(self.tasks)
        if not ids:
            return
        held = await self._store.renew(self.instance, ids, self._clock() + self._settings.lease_s)
        for batch_id in ids:
            if batch_id not in held:
                log.warning("batch %s: lease lost, stopped here", batch_id)
                self.tasks[batch_id].cancel()
            elif held[batch_id] == "cancelling":
                self._stops[batch_id].set()

    async def claim(self) -> int:
        """Take batches while there is room; how many were taken."""
        taken = 0
        while len(self.tasks) < self._settings.max_running:
            now = self._clock()
            record = await self._store.claim(self.instance, now, now + self._settings.lease_s)
            if record is None:
                break
            self._stops[record.id] = asyncio.Event()
            self.tasks[record.id] = asyncio.create_task(self._run(record))
            taken += 1
        return taken

    async def purge(self) -> int:
        if self._files.ttl_days <= 0:
            return 0
        now = self._clock()
        if not await self._purge_claim(
            PURGE_JOB, self.instance, now, now + 2 * self._purge_interval_s
        ):
            return 0
        count = await self._store.purge(int(now - self._files.ttl_days * _DAY_S))
        if count:
            log.info("purged %d expired files and batches", count)
        return count

    async def release_dead_siblings(self) -> int:
        """At start-up: the batches held by this host:port's processes that
        no longer exist (a SIGKILLed cortex restarted on its port) are let
        go at once, without waiting for their leases; how many."""
        prefix = self.instance.rsplit("/", 1)[0] + "/"
        dead = 0
        for batch_id, owner in await self._store.held_under(prefix):
            pid = owner[len(prefix) :]
            if owner != self.instance and pid.isdigit() and not pid_alive(int(pid)):
                await self._store.release(batch_id, owner)
                dead += 1
        if dead:
            log.info("%d batches of a stopped process here taken up at once", dead)
        return dead

    async def forever(self) -> None:
        await run_steps([("release", self.release_dead_siblings)], self._failed)
        tick = min(self._settings.poll_s, self._settings.lease_s / 3)
        steps = [("renew", self.renew), ("claim", self.claim)]
        slow = [("purge", self.purge)]
        await upkeep_loop(tick, steps, self._purge_interval_s, slow, self._failed)

    async def stop(self) -> None:
        """Stop this process's batches and let go of their leases, so that
        another instance (or this one restarted) takes them at once."""
        tasks = dict(self.tasks)
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for batch_id in tasks:
            with contextlib.suppress(Exception):
                await self._store.release(batch_id, self.instance)

    def _failed(self, op: str) -> None:
        log.exception("batch runner failed: %s", op)

    async def _run(self, record: StoredBatch) -> None:
        try:
            job = BatchJob(self._store, self._run_line, self._files, self._settings, self._clock)
            await job.run(record, self._stops[record.id])
            await self._store.release(record.id, self.instance)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The lease lapses and the batch is taken up again (here too).
            log.exception("batch %s failed to run; it will be taken up again", record.id)
        finally:
            self.tasks.pop(record.id, None)
            self._stops.pop(record.id, None)


def _reaped(tasks: set[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
    """The tasks still running; one that failed (its result could not be
    stored) fails the run, so that the batch is taken up again and the
    line runs again rather than go missing from the output."""
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise RuntimeError("a batch line's result could not be stored") from task.exception()
    return {t for t in tasks if not t.done()}


class BatchJob:
    """One batch taken under a lease, run from the status it is in to its end."""

    def __init__(
        self,
        store: BatchStore,
        run_line: RunLine,
        files: FilesSettings,
        settings: BatchSettings,
        clock: Callable[[], float],
    ) -> None:
        self._store, self._run_line = store, run_line
        self._files, self._settings, self._clock = files, settings, clock
        self._progress_lock = asyncio.Lock()
        self._last_progress = 0.0

    async def run(self, record: StoredBatch, stop: asyncio.Event) -> None:
        self._id, self._tenant = record.id, record.tenant
        self._principal = from_json(record.principal)
        self._stop = stop
        batch = record.batch
        while batch["status"] not in lifecycle.TERMINAL:
            status = batch["status"]
            if status == "validating":
                batch = await self._validate(batch)
            elif status == "in_progress":
                batch = await self._run_lines(batch)
            elif status == "finalizing":
                batch = await self._end(batch, "completed")
            else:  # cancelling
                batch = await self._end(batch, "cancelled")

    def _now(self) -> int:
        return int(self._clock())

    def _expired(self, batch: dict[str, Any]) -> bool:
        return self._clock() >= float(batch["expires_at"])

    async def _move(self, batch: dict[str, Any], to: str, **fields: Any) -> dict[str, Any]:
        """Move the stored batch; if it changed meanwhile (a cancel), what it is now."""
        new = lifecycle.moved(batch, to, self._now(), **fields)
        if await self._store.swap(self._id, batch["status"], new):
            return new
        current = await self._store.get_batch(self._id)
        if current is None:
            raise RuntimeError(f"batch {self._id} vanished")
        return current.batch

    async def _validate(self, batch: dict[str, Any]) -> dict[str, Any]:
        if self._expired(batch):
            return await self._move(batch, "expired")
        file = await self._store.get_file(batch["input_file_id"])
        if file is None or file.tenant != self._tenant or file.purpose != "batch":
            return await self._fail(
                batch, "invalid_file", "The input file is not a batch file here."
            )
        seen: set[str] = set()
        total, model = 0, None
        async for number, raw in file_lines(self._store, file.id):
            parsed = parse_line(number, raw, batch["endpoint"])
            if parsed is None:
                continue
            total += 1
            if total > self._files.max_lines:
                return await self._fail(
                    batch, "too_many_requests", f"More than {self._files.max_lines} requests."
                )
            if isinstance(parsed, BatchLine):
                if parsed.custom_id in seen:
                    return await self._fail(
                        batch,
                        "duplicate_custom_id",
                        f"The custom_id '{parsed.custom_id}' appears more than once.",
                        number,
                    )
                seen.add(parsed.custom_id)
                model = model or parsed.body.get("model")
        if total == 0:
            return await self._fail(batch, "empty_file", "The input file has no requests.")
        counted = lifecycle.with_counts(batch, total, 0, 0)
        return await self._move(counted, "in_progress", model=model)

    async def _fail(
        self, batch: dict[str, Any], code: str, message: str, line: int | None = None
    ) -> dict[str, Any]:
        log.info("batch %s failed validation: %s", self._id, message)
        return await self._move(batch, "failed", errors=lifecycle.failure(code, message, line))

    async def _run_lines(self, batch: dict[str, Any]) -> dict[str, Any]:
        done = await self._store.done_lines(self._id)
        self._counts = list(await self._store.counts(self._id))
        self._batch = batch
        in_flight: set[asyncio.Task[None]] = set()
        stopping = asyncio.ensure_future(self._stopping(batch))
        try:
            async for number, raw in file_lines(self._store, batch["input_file_id"]):
                if stopping.done():
                    break
                if number in done:
                    continue
                parsed = parse_line(number, raw, batch["endpoint"])
                if parsed is None:
                    continue
                if isinstance(parsed, LineError):
                    await self._record(parsed.number, False, refused_line(parsed))
                    continue
                while len(in_flight) >= self._settings.max_in_flight and not stopping.done():
                    await asyncio.wait({*in_flight, stopping}, return_when=asyncio.FIRST_COMPLETED)
                    in_flight = _reaped(in_flight)
                if stopping.done():
                    break
                in_flight.add(asyncio.create_task(self._one(batch["endpoint"], parsed)))
            while in_flight and not stopping.done():
                await asyncio.wait({*in_flight, stopping}, return_when=asyncio.FIRST_COMPLETED)
                in_flight = _reaped(in_flight)
        finally:
            stopping.cancel()
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
        if self._stop.is_set():
            current = await self._store.get_batch(self._id)
            return current.batch if current is not None else batch
        if self._expired(batch):
            await self._expire_rest(batch)
            return await self._end(batch, "expired")
        total = batch["request_counts"]["total"]
        counted = lifecycle.with_counts(batch, total, *self._counts)
        return await self._move(counted, "finalizing")

    async def _stopping(self, batch: dict[str, Any]) -> None:
        """Until the batch is cancelled or its window ends."""
        await set_within(self._stop, asyncio.sleep(max(0.0, batch["expires_at"] - self._clock())))

    async def _one(self, endpoint: str, line: BatchLine) -> None:
        result = await self._run_line(endpoint, self._principal, line)
        await self._record(line.number, result.ok, result.line)

    async def _record(self, number: int, ok: bool, body: str) -> None:
        """Store a line's result, then count it (and now and then write the counts)."""
        if not await self._store.record(self._id, number, ok, body):
            return
        self._counts[0 if ok else 1] += 1
        if self._clock() - self._last_progress >= PROGRESS_S:
            await self._progress()

    async def _progress(self) -> None:
        async with self._progress_lock:
            self._last_progress = self._clock()
            total = self._batch["request_counts"]["total"]
            counted = lifecycle.with_counts(self._batch, total, *self._counts)
            if await self._store.swap(self._id, "in_progress", counted):
                self._batch = counted
                return
            current = await self._store.get_batch(self._id)
            if current is not None and current.status == "cancelling":
                self._stop.set()

    async def _expire_rest(self, batch: dict[str, Any]) -> None:
        """The lines not done fail with batch_expired."""
        done = await self._store.done_lines(self._id)
        async for number, raw in file_lines(self._store, batch["input_file_id"]):
            if number in done:
                continue
            parsed = parse_line(number, raw, batch["endpoint"])
            if isinstance(parsed, BatchLine):
                await self._record(
                    number, False, error_line(parsed.custom_id, "batch_expired", EXPIRED_MESSAGE)
                )
            elif isinstance(parsed, LineError):
                await self._record(number, False, refused_line(parsed))

    async def _end(self, batch: dict[str, Any], to: str) -> dict[str, Any]:
        """Build the output and error files from the lines' results, then
        move the batch to `to` with them."""
        completed, failed = await self._store.counts(self._id)
        tokens = [0, 0]
        output = await self._result_file(batch, True, tokens)
        errors = await self._result_file(batch, False, tokens)
        total = batch["request_counts"]["total"]
        counted = lifecycle.with_counts(batch, total, completed, failed)
        return await self._move(
            counted,
            to,
            output_file_id=output,
            error_file_id=errors,
            usage=lifecycle.usage(*tokens),
        )

    async def _result_file(self, batch: dict[str, Any], ok: bool, tokens: list[int]) -> str | None:
        """The output (ok) or error file (None: no such lines). Its id is
        the batch's own, so that a batch ended again after a crash
        replaces the file it had begun."""
        kind = "output" if ok else "error"
        file_id = f"file-{self._id.removeprefix('batch_')}-{kind}"
        await self._store.delete_file(file_id)

        async def pieces() -> AsyncIterator[bytes]:
            async for line in self._store.results(self._id, ok):
                if ok:
                    prompt, completion = usage_of(line)
                    tokens[0] += prompt
                    tokens[1] += completion
                yield line.encode() + b"\n"

        stored = await write_file(
            self._store,
            StoredFile(
                file_id,
                self._tenant,
                self._now(),
                "",
                "batch_output",
                f"{batch['id']}_{kind}.jsonl",
            ),
            pieces(),
            self._files.chunk_bytes,
            max_bytes=1 << 62,
            max_lines=1 << 62,
        )
        if stored.bytes == 0:
            await self._store.delete_file(file_id)
            return None
        return file_id
