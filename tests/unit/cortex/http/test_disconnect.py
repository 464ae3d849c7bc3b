"""CancelOnDisconnect: a handler whose client has left is cancelled wherever
it waits, once the body has been read; its own tasks (background work) are
not; a handler that finishes is left alone."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from cortex.http.disconnect import CancelOnDisconnect

SCOPE: Scope = {"type": "http", "method": "POST", "path": "/", "headers": []}


class Client:
    """The server side of one connection: the body, then (when told) the disconnect."""

    def __init__(self) -> None:
        self.leave = asyncio.Event()
        self.sent: list[Message] = []
        self._body_sent = False

    async def receive(self) -> Message:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)


async def test_a_handler_waiting_when_its_client_leaves_is_cancelled() -> None:
    client = Client()
    waiting, cancelled = asyncio.Event(), asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        waiting.set()
        try:
            await asyncio.Event().wait()  # a generation that never ends
        except asyncio.CancelledError:
            cancelled.set()
            raise

    served = asyncio.create_task(CancelOnDisconnect(app)(SCOPE, client.receive, client.send))
    await waiting.wait()
    client.leave.set()
    await asyncio.wait_for(served, 1)  # ends quietly: nobody is left to answer
    assert cancelled.is_set()


async def test_background_work_of_the_handler_survives_its_client() -> None:
    client = Client()
    background: list[asyncio.Task[None]] = []
    finish = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()

        async def work() -> None:
            await finish.wait()

        background.append(asyncio.create_task(work()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    await CancelOnDisconnect(app)(SCOPE, client.receive, client.send)
    client.leave.set()
    await asyncio.sleep(0)
    assert not background[0].done()
    finish.set()
    await asyncio.wait_for(background[0], 1)


async def test_a_cancellation_from_elsewhere_is_not_swallowed() -> None:
    client = Client()
    waiting = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        waiting.set()
        await asyncio.Event().wait()

    served = asyncio.create_task(CancelOnDisconnect(app)(SCOPE, client.receive, client.send))
    await waiting.wait()
    served.cancel()  # the server stopping
    with pytest.raises(asyncio.CancelledError):
        await served
