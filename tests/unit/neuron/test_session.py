"""The neuron's side of the batched token stream (neuron/session.py) without
a server: a session fed SessionUp messages, its requests served by a fake
generation, what it sends back: one engine step's deltas together, a
cancel or the deadline ending the request's generation, an error ending
its request only, a drain refusing new requests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import pytest

from axon.errors import InternalError, UnavailableError
from axon.v1 import neuron_pb2 as pb
from neuron.session import Metadata, Session, Sessions, batches


def _response(text: str) -> pb.GenerateResponse:
    return pb.GenerateResponse(choices=[pb.ChoiceDelta(text=text)])


class _Engine:
    """A generation of `max_tokens` deltas, one a loop turn (an engine step
    for every running request at once), failing where the prompt says
    "fail"; it notes which requests were closed before their end."""

    def __init__(self) -> None:
        self.aborted: list[str] = []
        self.running = 0

    async def generation(
        self, request: pb.GenerateRequest, metadata: Metadata
    ) -> AsyncGenerator[pb.GenerateResponse, None]:
        self.running += 1
        finished = False
        try:
            for i in range(request.sampling.max_tokens):
                await asyncio.sleep(0)
                if request.prompt == "fail" and i == 2:
                    raise InternalError("the model server failed while handling the request")
                yield _response(f"{request.request_id}-{i} ")
            finished = True
        finally:
            self.running -= 1
            if not finished:
                self.aborted.append(request.request_id)


def _start(
    request_id: int, max_tokens: int, prompt: str = "", timeout_s: float = 0
) -> pb.SessionUp:
    request = pb.GenerateRequest(
        request_id=f"r{request_id}",
        model="m",
        prompt=prompt,
        sampling=pb.SamplingParams(max_tokens=max_tokens),
    )
    start = pb.SessionStart(id=request_id, request=request, timeout_s=timeout_s)
    return pb.SessionUp(start=start)


def _cancel(request_id: int) -> pb.SessionUp:
    return pb.SessionUp(cancel=pb.SessionCancel(id=request_id))


class _Cortex:
    """cortex's end of one session: what it sends, what it received."""

    def __init__(self) -> None:
        self.up: asyncio.Queue[pb.SessionUp | None] = asyncio.Queue()
        self.received: list[pb.SessionDown] = []

    async def upstream(self) -> AsyncIterator[pb.SessionUp]:
        while (message := await self.up.get()) is not None:
            yield message

    def items(self, request_id: int) -> list[pb.SessionItem]:
        return [i for down in self.received for i in down.items if i.id == request_id]

    def ended(self, request_id: int) -> str | None:
        """How the request ended: "end", "error" or None (not yet)."""
        items = self.items(request_id)
        return str(items[-1].WhichOneof("kind")) if items else None


async def _serve(session: Session | Sessions, cortex: _Cortex) -> None:
    async for down in session.serve(cortex.upstream()):
        cortex.received.append(down)


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.001)


def _refusal_none() -> None:
    return None


async def test_one_engine_steps_deltas_of_every_request_travel_in_one_message() -> None:
    engine, cortex = _Engine(), _Cortex()
    session = Session(engine.generation, _refusal_none)
    for i in (1, 2, 3):
        cortex.up.put_nowait(_start(i, max_tokens=20))
    cortex.up.put_nowait(None)  # cortex closes its side: the session ends with its requests
    await asyncio.wait_for(_serve(session, cortex), 5)
    for i in (1, 2, 3):
        items = cortex.items(i)
        assert [x.response.choices[0].text for x in items[:-1]] == [f"r{i}-{k} " for k in range(20)]
        assert items[-1].WhichOneof("kind") == "end"
    responses = sum(len(down.items) for down in cortex.received)
    # 63 items (3 x 20 deltas and 3 ends): per step one message, not three.
    assert len(cortex.received) <= 22, [len(d.items) for d in cortex.received]
    assert responses == 63


async def test_a_cancel_aborts_its_request_only_and_says_nothing_more_of_it() -> None:
    engine, cortex = _Engine(), _Cortex()
    session = Session(engine.generation, _refusal_none)
    served = asyncio.create_task(_serve(session, cortex))
    cortex.up.put_nowait(_start(1, max_tokens=10_000))
    cortex.up.put_nowait(_start(2, max_tokens=50))
    await _until(lambda: len(cortex.items(1)) >= 3)
    cortex.up.put_nowait(_cancel(1))
    await _until(lambda: cortex.ended(2) == "end")
    assert engine.aborted == ["r1"]
    seen = len(cortex.items(1))
    cortex.up.put_nowait(None)
    await asyncio.wait_for(served, 5)
    assert len(cortex.items(1)) == seen and cortex.ended(1) == "response"


async def test_an_error_ends_its_request_only_with_what_generate_would_say() -> None:
    engine, cortex = _Engine(), _Cortex()
    session = Session(engine.generation, _refusal_none)
    cortex.up.put_nowait(_start(1, max_tokens=10, prompt="fail"))
    cortex.up.put_nowait(_start(2, max_tokens=10))
    cortex.up.put_nowait(None)
    await asyncio.wait_for(_serve(session, cortex), 5)
    error = cortex.items(1)[-1].error
    assert (error.code, error.kind) == ("INTERNAL", "internal")
    assert len(cortex.items(1)) == 3  # two deltas, then the error
    assert cortex.ended(2) == "end" and len(cortex.items(2)) == 11


async def test_an_untyped_failure_still_ends_its_request_with_an_internal_error() -> None:
    async def broken(
        request: pb.GenerateRequest, metadata: Metadata
    ) -> AsyncGenerator[pb.GenerateResponse, None]:
        yield _response("a ")
        raise RuntimeError("a bug")

    cortex = _Cortex()
    session = Session(broken, _refusal_none)
    cortex.up.put_nowait(_start(1, max_tokens=10))
    cortex.up.put_nowait(None)
    await asyncio.wait_for(_serve(session, cortex), 5)
    error = cortex.items(1)[-1].error
    assert (error.code, error.kind) == ("INTERNAL", "internal")


async def test_the_deadline_ends_the_request_in_the_engine_as_deadline_exceeded() -> None:
    engine, cortex = _Engine(), _Cortex()
    session = Session(engine.generation, _refusal_none)
    cortex.up.put_nowait(_start(1, max_tokens=10**9, timeout_s=0.05))
    cortex.up.put_nowait(None)
    await asyncio.wait_for(_serve(session, cortex), 5)
    error = cortex.items(1)[-1].error
    assert (error.code, error.kind) == ("DEADLINE_EXCEEDED", "deadline_exceeded")
    assert engine.aborted == ["r1"]


async def test_cortex_gone_aborts_every_request_of_its_session() -> None:
    engine, cortex = _Engine(), _Cortex()
    session = Session(engine.generation, _refusal_none)
    served = asyncio.create_task(_serve(session, cortex))
    for i in (1, 2):
        cortex.up.put_nowait(_start(i, max_tokens=10**9))
    await _until(lambda: engine.running == 2)
    served.cancel()  # what gRPC does to the handler when the stream breaks
    with contextlib.suppress(asyncio.CancelledError):
        await served
    assert sorted(engine.aborted) == ["r1", "r2"] and engine.running == 0


async def test_a_draining_neuron_refuses_new_requests_and_ends_its_sessions_with_them() -> None:
    engine, cortex = _Engine(), _Cortex()
    sessions = Sessions(engine.generation)
    served = asyncio.create_task(_serve(sessions, cortex))
    cortex.up.put_nowait(_start(1, max_tokens=200))
    await _until(lambda: engine.running == 1)
    sessions.drain()
    cortex.up.put_nowait(_start(2, max_tokens=5))
    await asyncio.wait_for(served, 5)  # ended though cortex never closed its side
    error = cortex.items(2)[-1].error
    assert (error.code, error.kind) == ("UNAVAILABLE", UnavailableError.kind)
    assert cortex.ended(1) == "end" and len(cortex.items(1)) == 201


@pytest.mark.parametrize(
    ("sizes", "messages"), [([10] * 5, 1), ([3000, 3000, 10], 2), ([5000, 10], 2), ([5000], 1)]
)
def test_batches_keep_the_order_and_cut_before_the_limit(sizes: list[int], messages: int) -> None:
    items = [pb.SessionItem(id=i, response=_response("x" * size)) for i, size in enumerate(sizes)]
    out = batches(items, limit=4000)
    assert [item.id for down in out for item in down.items] == list(range(len(sizes)))
    for down in out:
        assert len(down.items) == 1 or down.ByteSize() <= 4000
    assert len(out) == messages
