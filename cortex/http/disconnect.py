"""Stop work for a client that has gone away.

`CancelOnDisconnect` (ASGI middleware, every endpoint) watches the
connection once the request body has been read, and when the client leaves
cancels the request's handler wherever it is waiting: queued in the pool,
waiting for the first token (which, with output held back for auto tool
choice, may be the whole generation), collecting a non-streamed answer, or
streaming. The cancellation reaches the gRPC call, which aborts the
generation in the neuron's engine. Work that is not the handler's own (a
background response, a task of its own) is not touched: its creator may
leave.

`cancel_on_disconnect` does the same for one awaitable, for a handler that
wants to know (a non-streamed answer nobody will read is not a failure).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from fastapi import Request
from starlette.types import Message, Receive, Scope, Send

from axon.errors import InternalError
from cortex.http.asgi import HttpMiddleware

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


class CancelOnDisconnect(HttpMiddleware):
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        connection = _Connection(receive)
        watcher = asyncio.create_task(connection.watch(handler))
        try:
            await self.app(scope, connection.receive, send)
        except asyncio.CancelledError:
            # Our own cancellation ends the request quietly: nobody is left
            # to answer. Any other (the server stopping) goes on.
            if not connection.cancelled_handler or handler.uncancel() > 0:
                raise
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


class _Connection:
    """The request's receive channel, shared by the app and the watcher:
    after the body only a disconnect can come, which both see."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._body_read = asyncio.Event()
        self._gone = asyncio.Event()
        self.cancelled_handler = False

    async def receive(self) -> Message:
        if self._body_read.is_set():
            await self._gone.wait()
            return {"type": "http.disconnect"}
        message = await self._receive()
        self._saw(message)
        return message

    def _saw(self, message: Message) -> None:
        if message["type"] == "http.disconnect":
            self._gone.set()
        elif message["type"] == "http.request" and not message.get("more_body", False):
            self._body_read.set()

    async def watch(self, handler: asyncio.Task[object]) -> None:
        await self._body_read.wait()
        while not self._gone.is_set():
            self._saw(await self._receive())
        if not handler.done():
            self.cancelled_handler = True
            handler.cancel()
