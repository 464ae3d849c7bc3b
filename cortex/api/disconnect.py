"""Stop work for a client that has gone away.

Streamed responses are cancelled by Starlette when the client disconnects;
a non-streamed request is not, so without this a dropped client would leave
its generation running in the engine until the end."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request

from neuraxis.core.errors import InternalError

T = TypeVar("T")


class ClientDisconnectedError(InternalError):
    """The client left before the answer was ready; nobody will read this."""


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
    if not task.done() or task.cancelled():
        raise ClientDisconnectedError("the client disconnected")
    return task.result()


async def _wait_for_disconnect(request: Request) -> None:
    # The body has been read, so the next message is the disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass
