"""The neuron stream of a stored streamed response, read in a task of its
own so that the run can be stopped (its response deleted) without
cancelling the handler that writes to the client.

`Pump` reads a few messages ahead at most (`ahead`), hands them over in
order, and re-raises the stream's error where they are read. When its task
is cancelled (`ResponseRun.stop`), the generation is aborted where the task
waits for the neuron, and the reader gets `stopped` raised, so that the
stream still ends with its terminal event. Not here: what a stop means for
the stored response (run.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from axon.v1 import neuron_pb2 as pb

_END = object()
_STOPPED = object()


class Pump:
    def __init__(
        self,
        stream: AsyncIterator[pb.GenerateResponse],
        stopped: Callable[[], BaseException],
        ahead: int = 8,
    ) -> None:
        self._stopped = stopped
        # Unbounded, but `_room` bounds what the reader can be ahead by; the
        # task's end (normal, error, stop) always finds a place.
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._room = asyncio.Semaphore(ahead)
        self.task = asyncio.create_task(self._read(stream))
        self.task.add_done_callback(self._ended)

    async def _read(self, stream: AsyncIterator[pb.GenerateResponse]) -> None:
        async for message in stream:
            await self._room.acquire()
            self._queue.put_nowait(message)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            self._queue.put_nowait(_STOPPED)
        else:
            error = task.exception()
            self._queue.put_nowait(_END if error is None else error)

    async def __aiter__(self) -> AsyncIterator[pb.GenerateResponse]:
        while True:
            item = await self._queue.get()
            if isinstance(item, pb.GenerateResponse):
                self._room.release()
                yield item
            elif item is _END:
                return
            elif item is _STOPPED:
                raise self._stopped()
            else:
                assert isinstance(item, BaseException)
                raise item

    def close(self) -> None:
        """Stop reading (the reader has gone): aborts the generation."""
        self.task.cancel()
