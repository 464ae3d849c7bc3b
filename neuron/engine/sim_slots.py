"""The simulated engine's queues: at most `limit` requests at once (0: no
limit), the others waiting their turn, the highest priority class first when
`by_priority` (vLLM's scheduling_policy = "priority"), else in arrival
order. The engine's running slots are one; its prefill lane (limit 1) the
other, so that under `by_priority` an interactive prompt is prefilled before
the batch prompts queued ahead of it, as vLLM's scheduler takes waiting
requests by priority."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import AsyncIterator

from axon.priority import DEFAULT_CLASS, PriorityClass, rank


class Slots:
    """At most `limit` requests running (0: no limit); the others wait, the
    highest class first when `by_priority`, else in arrival order."""

    def __init__(self, limit: int, by_priority: bool) -> None:
        self._limit, self._by_priority = limit, by_priority
        self._running = 0
        self._arrivals = 0
        self._queue: list[tuple[int, int, asyncio.Future[None]]] = []

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @contextlib.asynccontextmanager
    async def slot(self, cls: PriorityClass = DEFAULT_CLASS) -> AsyncIterator[None]:
        if self._limit and (self._running >= self._limit or self._queue):
            self._arrivals += 1
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (rank(cls) if self._by_priority else 0, self._arrivals, turn)
            heapq.heappush(self._queue, entry)
            try:
                await turn
            except BaseException:
                if turn.done() and not turn.cancelled():
                    self._release()  # its turn came as it was cancelled
                else:
                    self._queue.remove(entry)
                    heapq.heapify(self._queue)
                raise
        else:
            self._running += 1
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self._running -= 1
        while self._queue and self._running < self._limit:
            _, _, turn = heapq.heappop(self._queue)
            if not turn.done():
                self._running += 1
                turn.set_result(None)
