from __future__ import annotations

import asyncio
import logging

import pytest

from axon.periodic import every

log = logging.getLogger("tests.periodic")


async def test_a_failed_round_is_logged_on_the_callers_logger_and_the_next_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rounds: list[int] = []
    second = asyncio.Event()

    async def work() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise RuntimeError("store down")
        second.set()

    task = asyncio.create_task(every(0, work, log, "the work failed; next round retries"))
    await asyncio.wait_for(second.wait(), timeout=30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [record] = [r for r in caplog.records if r.name == "tests.periodic"]
    assert record.getMessage() == "the work failed; next round retries"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert rounds[:2] == [0, 1]
