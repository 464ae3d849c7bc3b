"""Ending in-flight requests when cortex stops, with their terminal events.

On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and waits for the
open ones up to its graceful timeout; then it cancels what is left, which
cuts a stream off without its terminal event and logs a CancelledError
traceback. A `Cutoff` runs out first: shortly before that timeout it ends
every neuron stream still being read with UnavailableError, which the API
turns into the stream's terminal events (an error chunk and `[DONE]`, or the
Responses API's failure) or a 503 body, as it would for a neuron that went
away. The gRPC call is cancelled on the way out, so the neuron stops
generating too.

What is not here: the server that decides when to cut (cortex/main.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from axon.errors import UnavailableError

T = TypeVar("T")

SHUTTING_DOWN = "cortex is shutting down; retry the request"


class Cutoff:
    """Streams read through `guard` end with UnavailableError once `cut`.

    Only a read waiting inside `guard` is interrupted (its task is cancelled
    there and the cancellation turned into the error), so nothing else the
    request's task awaits, such as writing to the client, is ever cut."""

    def __init__(self) -> None:
        self._cut = False
        self._reading: set[asyncio.Task[object]] = set()
        self._interrupted: set[asyncio.Task[object]] = set()

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> int:
        """End every guarded stream now (and any read later); returns how
        many reads were interrupted."""
        self._cut = True
        for task in self._reading:
            self._interrupted.add(task)
            task.cancel()
        return len(self._reading)

    async def guard(self, stream: AsyncIterator[T]) -> AsyncIterator[T]:
        try:
            while True:
                if self._cut:
                    raise UnavailableError(SHUTTING_DOWN)
                # Looked up for each read: the first message of a stream is
                # read by the request's task, the rest by the response's.
                task = asyncio.current_task()
                assert task is not None
                self._reading.add(task)
                try:
                    item = await anext(stream)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if task not in self._interrupted:
                        raise  # the client left, or the server's own cancel
                    self._interrupted.discard(task)
                    task.uncancel()
                    raise UnavailableError(SHUTTING_DOWN) from None
                finally:
                    self._reading.discard(task)
                yield item
        finally:
            # Not left to the garbage collector: closing the stream cancels
            # its gRPC call now.
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()


# One server per process, so one cutoff: the server cuts it, the request path
# reads its streams through it.
CUTOFF = Cutoff()
