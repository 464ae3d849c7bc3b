"""The controller's work on each replica (its start or its drain) as one
asyncio task per replica id; a task that fails is logged with the replica,
since nothing awaits it but shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("neuraxis.controller")


class ReplicaTasks:
    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def run(self, replica_id: str, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as the replica's task (replacing the one it had)."""
        task = asyncio.create_task(work)
        self._tasks[replica_id] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._tasks.get(replica_id) is finished:
                del self._tasks[replica_id]
            error = None if finished.cancelled() else finished.exception()
            if error is not None:
                log.error("replica %s: %s", replica_id, error, exc_info=error)

        task.add_done_callback(done)

    def cancel(self, replica_id: str) -> None:
        """Cancel the replica's task if it is still running."""
        task = self._tasks.get(replica_id)
        if task is not None and not task.done():
            task.cancel()

    async def wait(self) -> None:
        """Until every task now running has ended, however it ends."""
        await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)
