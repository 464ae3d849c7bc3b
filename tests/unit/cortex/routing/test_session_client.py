"""cortex's client of the batched token stream (routing/session_client.py):
the demux alone, then against a sim neuron's gRPC server in-process: many
requests on one stream, an error breaking its request only, the stream's
break failing every open request as unreachable and the next request
opening a new stream. (What both token streams must do alike runs over
both in tests/unit/neuron/test_server.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from axon.errors import (
    ContextLengthExceededError,
    InternalError,
    NeuraxisError,
    UnavailableError,
)
from axon.v1 import neuron_pb2 as pb
from cortex.routing.client import NeuronClient
from cortex.routing.session_client import Delivery, Demux, SessionClient
from neuron.engine.sim import SimEngine, SimOptions
from tests.unit.neuron.sim_neuron import start_sim_neuron


def _item(request_id: int, text: str) -> pb.SessionItem:
    response = pb.GenerateResponse(choices=[pb.ChoiceDelta(text=text)])
    return pb.SessionItem(id=request_id, response=response)


def _drain(queue: asyncio.Queue[Delivery]) -> list[Delivery]:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


async def test_the_demux_hands_each_item_to_its_request_and_closes_it_at_its_last() -> None:
    demux = Demux()
    (a, qa), (b, qb) = demux.open(), demux.open()
    assert a != b
    error = pb.SessionError(
        code="INVALID_ARGUMENT", message="too long", kind="context_length_exceeded"
    )
    demux.dispatch(
        pb.SessionDown(
            items=[
                _item(a, "x"),
                _item(b, "y"),
                _item(99, "of a request that left"),
                pb.SessionItem(id=b, error=error),
                _item(a, "z"),
                pb.SessionItem(id=a, end=pb.SessionEnd()),
            ]
        )
    )
    got_a, got_b = _drain(qa), _drain(qb)
    assert [d.choices[0].text for d in got_a[:2] if isinstance(d, pb.GenerateResponse)] == [
        "x",
        "z",
    ]
    assert got_a[2] is None
    assert isinstance(got_b[1], ContextLengthExceededError) and got_b[1].param == "messages"
    assert len(demux) == 0
    assert not demux.forget(a)  # ended: no cancel to send


async def test_a_broken_stream_fails_each_open_request_with_its_own_error() -> None:
    demux = Demux()
    queues = [demux.open()[1] for _ in range(3)]
    demux.fail(lambda: UnavailableError("gone"))
    errors = [q.get_nowait() for q in queues]
    assert all(isinstance(e, UnavailableError) for e in errors)
    assert len({id(e) for e in errors}) == 3  # raised in three tasks: three objects
    assert demux.failed and demux.open()[0] == 4  # ids never reused


def _request(request_id: str, max_tokens: int, prompt: str = "hello there") -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id=request_id,
        model="m",
        prompt=prompt,
        sampling=pb.SamplingParams(max_tokens=max_tokens),
    )


async def _text(client: NeuronClient, request: pb.GenerateRequest) -> str:
    return "".join([c.text async for r in client.generate(request, timeout=30) for c in r.choices])


@pytest.fixture
async def neuron() -> AsyncIterator[tuple[SimEngine, grpc.aio.Server, int]]:
    engine = SimEngine(SimOptions(served_id="m", itl_s=0.005, fail_after_tokens=20))
    server, port = await start_sim_neuron(engine)
    try:
        yield engine, server, port
    finally:
        await server.stop(None)


async def test_concurrent_requests_share_one_stream_and_get_what_generate_gives(
    neuron: tuple[SimEngine, grpc.aio.Server, int],
) -> None:
    _, _, port = neuron
    batched, single = SessionClient(f"127.0.0.1:{port}"), NeuronClient(f"127.0.0.1:{port}")
    try:
        requests = [_request(f"r{i}", max_tokens=5 + i, prompt=f"p{i}") for i in range(12)]
        got = await asyncio.gather(*(_text(batched, r) for r in requests))
        stream = batched._stream
        assert await asyncio.gather(*(_text(single, r) for r in requests)) == got
        assert len(set(got)) == 12 and all(got)
        # One stream for all of them, still open for the next.
        assert await _text(batched, requests[0]) == got[0] and batched._stream is stream
    finally:
        await batched.close()
        await single.close()


async def test_an_error_breaks_its_request_only(
    neuron: tuple[SimEngine, grpc.aio.Server, int],
) -> None:
    engine, _, port = neuron
    client = SessionClient(f"127.0.0.1:{port}")
    try:
        failing = _text(client, _request("long", max_tokens=100))  # fails after 20 tokens
        too_long = _text(client, _request("huge", max_tokens=10**6))
        fine = [_text(client, _request(f"ok{i}", max_tokens=15)) for i in range(4)]
        results = await asyncio.gather(failing, too_long, *fine, return_exceptions=True)
        assert isinstance(results[0], InternalError)
        assert isinstance(results[1], ContextLengthExceededError)
        assert all(isinstance(r, str) and r for r in results[2:]), results
        assert engine.load().running == 0
    finally:
        await client.close()


async def test_a_broken_stream_fails_every_open_request_as_unreachable_then_reopens(
    neuron: tuple[SimEngine, grpc.aio.Server, int],
) -> None:
    engine, server, port = neuron
    client = SessionClient(f"127.0.0.1:{port}")
    try:
        streams = [client.generate(_request(f"r{i}", max_tokens=19), 30) for i in range(3)]
        for stream in streams:
            await anext(stream)
        await server.stop(None)  # the neuron gone mid-stream

        async def rest(stream: AsyncIterator[pb.GenerateResponse]) -> NeuraxisError | None:
            try:
                async for _ in stream:
                    pass
            except NeuraxisError as e:
                return e
            return None

        errors = await asyncio.wait_for(asyncio.gather(*(rest(s) for s in streams)), 10)
        assert all(isinstance(e, UnavailableError) for e in errors), errors
        # Nothing listens: the next request fails as unreachable, not hangs.
        with pytest.raises(UnavailableError):
            await asyncio.wait_for(_text(client, _request("next", 3)), 10)
        # A neuron back on the port: the next request opens a new stream.
        again, _ = await start_sim_neuron(engine, port)
        try:
            for _ in range(50):  # the channel reconnects within its backoff
                try:
                    assert await _text(client, _request("back", 3))
                    break
                except UnavailableError:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("no new stream after the neuron came back")
        finally:
            await again.stop(None)
    finally:
        await client.close()
