"""Merging several neuron streams (a legacy completion's prompts): arrival
order, errors handed to the reader, and no reading ahead of a reader that
stops (the buffer between them is bounded)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from axon.errors import InternalError
from axon.v1 import neuron_pb2 as pb
from cortex.api.streams import merge


class Source:
    """A neuron stream of `count` messages (the last with usage) that
    counts how many were taken from it."""

    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.count, self.fail_at, self.taken = count, fail_at, 0

    async def stream(self) -> AsyncIterator[pb.GenerateResponse]:
        for i in range(self.count):
            await asyncio.sleep(0)
            if i == self.fail_at:
                raise InternalError("engine died")
            self.taken += 1
            last = i == self.count - 1
            yield (
                pb.GenerateResponse(usage=pb.Usage(completion_tokens=i))
                if last
                else (pb.GenerateResponse())
            )


async def _merged(sources: list[Source]) -> AsyncGenerator[tuple[int, pb.GenerateResponse], None]:
    """The merge of the sources' streams, as dispatch starts it: each
    stream's first message read, then merge."""
    streams = [s.stream() for s in sources]
    firsts = [await anext(s) for s in streams]
    merged = merge(firsts, streams)
    assert isinstance(merged, AsyncGenerator)
    return merged


async def test_every_message_of_every_stream_comes_out_once() -> None:
    sources = [Source(50), Source(30), Source(1)]
    seen = [0, 0, 0]
    async for i, _ in await _merged(sources):
        seen[i] += 1
    assert seen == [50, 30, 1]


async def test_a_reader_that_stops_stops_the_streams() -> None:
    sources = [Source(10_000) for _ in range(4)]
    merged = await _merged(sources)
    for _ in range(20):
        await anext(merged)
    for _ in range(50):  # time enough for pumps to run far ahead if they could
        await asyncio.sleep(0)
    taken = sum(s.taken for s in sources)
    # What was read: the 20 given out, one waiting per stream, one each in
    # the pumps' hands.
    assert taken <= 20 + 2 * len(sources)
    await merged.aclose()


async def test_a_failing_stream_raises_its_error_to_the_reader() -> None:
    sources = [Source(10_000), Source(100, fail_at=5)]
    with pytest.raises(InternalError, match="engine died"):
        async for _ in await _merged(sources):
            pass


async def test_closing_early_leaves_no_pump_behind() -> None:
    before = len(asyncio.all_tasks())
    merged = await _merged([Source(10_000) for _ in range(3)])
    await anext(merged)
    await anext(merged)
    for _ in range(10):  # the pumps fill the queue and wait to put more
        await asyncio.sleep(0)
    await merged.aclose()
    for _ in range(10):  # a cancelled task ends on its next turn
        await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == before
