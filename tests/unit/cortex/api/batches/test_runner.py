"""The batch runner on a real store (SQLite in the test's directory) with
a scripted line runner and a manual clock: a batch from validating to
completed, lines already done never run again (a resumed batch), failed
lines, validation failures, cancel, expiry and leases."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cortex.api.batches import lifecycle
from cortex.api.batches.files import file_lines, write_file
from cortex.api.batches.line_run import LineResult
from cortex.api.batches.lines import BatchLine, output_line
from cortex.api.batches.runner import BatchJob, BatchRunner
from cortex.api.batches.settings import BatchSettings, FilesSettings
from cortex.auth.principal import Principal
from cortex.store.batch_db import SqliteDb
from cortex.store.batches import BatchStore, StoredBatch, StoredFile
from harness.clock import ManualClock

CHAT = "/v1/chat/completions"
PRINCIPAL: dict[str, Any] = {"tenant": "t", "key_id": None, "models": [], "limits": {}}


class Lines:
    """The scripted line runner: answers at once (or when `gate` opens),
    and fails the custom_ids in `failing`."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.failing: set[str] = set()
        self.gate: asyncio.Event | None = None

    async def __call__(self, endpoint: str, principal: Principal, line: BatchLine) -> LineResult:
        assert principal.tenant == "t"
        if self.gate is not None:
            await self.gate.wait()
        self.ran.append(line.custom_id)
        if line.custom_id in self.failing:
            body = {"error": {"message": "no", "type": "invalid_request_error"}}
            return LineResult(False, output_line(line.custom_id, 400, "r", body))
        usage = {"prompt_tokens": 2, "completion_tokens": 3}
        return LineResult(True, output_line(line.custom_id, 200, "r", {"usage": usage}))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[BatchStore]:
    opened = BatchStore(SqliteDb(tmp_path / "batches.sqlite3"))
    yield opened
    await opened.close()


def _request(custom_id: str) -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body})


async def _pieces(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 7):  # odd pieces: lines cross chunk boundaries
        yield data[i : i + 7]


async def _batch(store: BatchStore, lines: list[str], clock: ManualClock) -> StoredBatch:
    file = StoredFile("file-in", "t", 1, "", "batch", "in.jsonl")
    await write_file(store, file, _pieces("\n".join(lines).encode()), 64, 1 << 20, 1000)
    now = int(clock())
    batch = lifecycle.new_batch("batch_1", "file-in", CHAT, "24h", None, now)
    record = StoredBatch("batch_1", "t", now, batch, PRINCIPAL)
    await store.create_batch(record)
    return record


async def _run(
    store: BatchStore, lines: Lines, clock: ManualClock, stop: asyncio.Event | None = None
) -> dict[str, Any]:
    job = BatchJob(store, lines, FilesSettings(chunk_bytes=64), BatchSettings(), clock)
    record = await store.get_batch("batch_1")
    assert record is not None
    await job.run(record, stop or asyncio.Event())
    done = await store.get_batch("batch_1")
    assert done is not None
    return done.batch


async def _file(store: BatchStore, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(raw) async for _, raw in file_lines(store, file_id)]


async def test_a_batch_runs_to_completed_with_its_output_file(store: BatchStore) -> None:
    clock, lines = ManualClock(), Lines()
    await _batch(store, [_request(f"r{i}") for i in range(20)], clock)
    batch = await _run(store, lines, clock)
    assert batch["status"] == "completed"
    assert batch["request_counts"] == {"total": 20, "completed": 20, "failed": 0}
    assert batch["error_file_id"] is None and batch["model"] == "m"
    assert batch["usage"]["total_tokens"] == 20 * 5
    output = await _file(store, batch["output_file_id"])
    assert [o["custom_id"] for o in output] == [f"r{i}" for i in range(20)]  # in line order
    stored = await store.get_file(batch["output_file_id"])
    assert stored is not None and (stored.tenant, stored.purpose) == ("t", "batch_output")


async def test_a_resumed_batch_never_runs_a_done_line_again(store: BatchStore) -> None:
    clock, lines = ManualClock(), Lines()
    record = await _batch(store, [_request(f"r{i}") for i in range(10)], clock)
    in_progress = lifecycle.moved(lifecycle.with_counts(record.batch, 10, 0, 0), "in_progress", 2)
    assert await store.swap("batch_1", "validating", in_progress)
    for number in (1, 2, 5):  # what a killed instance had done
        assert await store.record(
            "batch_1", number, True, output_line(f"r{number - 1}", 200, "x", {})
        )
    batch = await _run(store, lines, clock)
    assert sorted(lines.ran) == sorted(f"r{i}" for i in range(10) if i not in (0, 1, 4))
    assert batch["request_counts"]["completed"] == 10
    output = await _file(store, batch["output_file_id"])
    assert sorted(o["custom_id"] for o in output) == sorted(f"r{i}" for i in range(10))
    assert not await store.record("batch_1", 1, False, "{}")  # a result is written once


async def test_failed_and_refused_lines_go_to_the_error_file(store: BatchStore) -> None:
    clock, lines = ManualClock(), Lines()
    lines.failing = {"r1"}
    await _batch(store, [_request("r0"), _request("r1"), "", "{bad", _request("r2")], clock)
    batch = await _run(store, lines, clock)
    assert batch["status"] == "completed"
    assert batch["request_counts"] == {"total": 4, "completed": 2, "failed": 2}
    errors = await _file(store, batch["error_file_id"])
    assert [e["custom_id"] for e in errors] == ["r1", None]
    assert errors[0]["response"]["status_code"] == 400
    assert "Line 4" in errors[1]["error"]["message"]


@pytest.mark.parametrize(
    ("lines", "code", "line"),
    [
        ([_request("a"), _request("b"), _request("a")], "duplicate_custom_id", 3),
        (["", "  "], "empty_file", None),
    ],
)
async def test_a_file_that_cannot_run_fails_the_batch(
    store: BatchStore, lines: list[str], code: str, line: int | None
) -> None:
    clock = ManualClock()
    await _batch(store, lines, clock)
    batch = await _run(store, Lines(), clock)
    assert batch["status"] == "failed" and batch["failed_at"] is not None
    assert batch["errors"]["data"][0]["code"] == code
    assert batch["errors"]["data"][0]["line"] == line


async def test_a_deleted_input_file_fails_the_batch(store: BatchStore) -> None:
    clock = ManualClock()
    await _batch(store, [_request("a")], clock)
    await store.delete_file("file-in")
    batch = await _run(store, Lines(), clock)
    assert batch["status"] == "failed"


async def test_cancel_stops_the_lines_and_keeps_what_was_done(store: BatchStore) -> None:
    clock, lines = ManualClock(), Lines()
    lines.gate = asyncio.Event()
    record = await _batch(store, [_request(f"r{i}") for i in range(40)], clock)
    stop = asyncio.Event()
    running = asyncio.create_task(_run(store, lines, clock, stop))
    lines.gate.set()
    while len(lines.ran) < 5:
        await asyncio.sleep(0)
    lines.gate.clear()  # the lines in flight now wait
    current = await store.get_batch(record.id)
    assert current is not None
    assert await store.swap(
        record.id, "in_progress", lifecycle.moved(current.batch, "cancelling", 3)
    )
    stop.set()
    batch = await running
    assert batch["status"] == "cancelled" and batch["cancelled_at"] is not None
    output = await _file(store, batch["output_file_id"])
    assert len(output) == batch["request_counts"]["completed"] == len(lines.ran) < 40


async def test_past_its_window_a_batch_expires_with_what_was_done(store: BatchStore) -> None:
    clock, lines = ManualClock(), Lines()
    record = await _batch(store, [_request(f"r{i}") for i in range(5)], clock)
    validated = lifecycle.moved(lifecycle.with_counts(record.batch, 5, 0, 0), "in_progress", 2)
    assert await store.swap(record.id, "validating", validated)
    assert await store.record(record.id, 1, True, output_line("r0", 200, "x", {}))
    clock.now += 25 * 3600
    batch = await _run(store, lines, clock)
    assert batch["status"] == "expired" and lines.ran == []
    assert batch["request_counts"] == {"total": 5, "completed": 1, "failed": 4}
    errors = await _file(store, batch["error_file_id"])
    assert {e["error"]["code"] for e in errors} == {"batch_expired"}


def _runner(store: BatchStore, lines: Lines, clock: ManualClock, instance: str) -> BatchRunner:
    async def no_purge(job: str, holder: str, now: float, until: float) -> bool:
        return False

    return BatchRunner(
        store,
        lines,
        instance,
        BatchSettings(lease_s=30, max_running=1),
        FilesSettings(),
        purge_claim=no_purge,
        purge_interval_s=3600,
        clock=clock,
    )


async def _until(condition: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(10_000):
        if await condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never")


async def test_a_batch_held_under_a_lease_is_taken_over_once_it_lapses(store: BatchStore) -> None:
    clock, lines = ManualClock(), Lines()
    lines.gate = asyncio.Event()
    await _batch(store, [_request(f"r{i}") for i in range(3)], clock)
    first, second = _runner(store, lines, clock, "a/1"), _runner(store, Lines(), clock, "b/2")
    assert await first.claim() == 1
    assert await second.claim() == 0  # held
    clock.now += 31  # a's lease lapsed (it never renewed)
    assert await second.claim() == 1
    lost = first.tasks["batch_1"]
    await first.renew()  # a finds it lost the batch: its run stops, writing nothing
    with pytest.raises(asyncio.CancelledError):
        await lost
    assert lines.ran == []
    await second.tasks["batch_1"]

    async def completed() -> bool:
        record = await store.get_batch("batch_1")
        return record is not None and record.status == "completed"

    await _until(completed)
    await first.stop()
    await second.stop()


async def test_a_dead_process_of_this_host_port_lets_go_at_once(store: BatchStore) -> None:
    clock = ManualClock()
    await _batch(store, [_request("r0")], clock)
    # A process of host:1 that no longer exists (pid 2**22 + 1 is past pid_max).
    assert await store.claim(f"host:1/{2**22 + 1}", clock(), clock() + 30) is not None
    other = _runner(store, Lines(), clock, "other:2/5")
    assert await other.release_dead_siblings() == 0  # not its host:port
    restarted = _runner(store, Lines(), clock, "host:1/7")
    assert await restarted.release_dead_siblings() == 1
    assert await restarted.claim() == 1  # before the lease would have lapsed
    await restarted.tasks["batch_1"]


async def test_a_line_whose_result_is_lost_fails_the_run_not_the_line(store: BatchStore) -> None:
    clock, lines = ManualClock(), Lines()
    await _batch(store, [_request(f"r{i}") for i in range(6)], clock)
    real = lines.__call__
    broken = {"r3"}

    async def once_broken(endpoint: str, principal: Principal, line: BatchLine) -> LineResult:
        if line.custom_id in broken:
            broken.clear()
            raise OSError("the store went away")
        return await real(endpoint, principal, line)

    job = BatchJob(store, once_broken, FilesSettings(chunk_bytes=64), BatchSettings(), clock)
    record = await store.get_batch("batch_1")
    assert record is not None
    with pytest.raises(RuntimeError, match="could not be stored"):
        await job.run(record, asyncio.Event())
    batch = await _run(store, lines, clock)  # taken up again
    assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 6
    output = await _file(store, batch["output_file_id"])
    assert sorted(o["custom_id"] for o in output) == [f"r{i}" for i in range(6)]
