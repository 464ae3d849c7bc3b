"""The cutoff: a read waiting inside `guard` ends with UnavailableError when
cut (and the stream below is closed); nothing else the task awaits is
interrupted; a cancellation from elsewhere (a client that left) stays one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from axon.errors import UnavailableError
from cortex.shutdown import Cutoff


class Endless:
    """A stream that yields one item, then waits for ever; records its close."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()
        self.waiting = asyncio.Event()

    async def stream(self) -> AsyncIterator[int]:
        try:
            yield 1
            self.waiting.set()
            await asyncio.Event().wait()
            yield 2
        finally:
            self.closed.set()


async def _read_all(stream: AsyncIterator[int], into: list[int]) -> None:
    async for item in stream:
        into.append(item)


async def test_a_waiting_read_ends_with_unavailable_and_the_stream_is_closed() -> None:
    cutoff, source, got = Cutoff(), Endless(), list[int]()
    reader = asyncio.create_task(_read_all(cutoff.guard(source.stream()), got))
    await source.waiting.wait()
    assert cutoff.cut() == 1
    with pytest.raises(UnavailableError, match="shutting down"):
        await reader
    assert got == [1]
    assert source.closed.is_set()
    assert not reader.cancelled()


async def test_a_task_busy_elsewhere_is_not_interrupted_and_its_next_read_ends() -> None:
    cutoff, source = Cutoff(), Endless()
    writing = asyncio.Event()
    written = asyncio.Event()

    async def request() -> str:
        stream = cutoff.guard(source.stream())
        await anext(stream)
        writing.set()
        await written.wait()  # e.g. sending the item to the client
        try:
            await anext(stream)
        except UnavailableError:
            return "ended"
        return "read on"

    task = asyncio.create_task(request())
    await writing.wait()
    assert cutoff.cut() == 0
    written.set()
    assert await task == "ended"


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    cutoff, source, got = Cutoff(), Endless(), list[int]()
    reader = asyncio.create_task(_read_all(cutoff.guard(source.stream()), got))
    await source.waiting.wait()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert source.closed.is_set()


async def test_a_stream_that_ends_is_read_to_its_end() -> None:
    async def three() -> AsyncIterator[int]:
        for i in range(3):
            yield i

    got: list[int] = []
    await _read_all(Cutoff().guard(three()), got)
    assert got == [0, 1, 2]


async def test_the_read_is_interrupted_in_whichever_task_makes_it() -> None:
    """cortex reads a stream's first message in the request's task and the
    rest in the response's task."""
    cutoff, source = Cutoff(), Endless()
    stream = cutoff.guard(source.stream())

    async def read() -> int:
        return await anext(stream)

    assert await asyncio.create_task(read()) == 1
    second = asyncio.create_task(read())
    await source.waiting.wait()
    assert cutoff.cut() == 1
    with pytest.raises(UnavailableError):
        await asyncio.wait_for(second, timeout=5)
