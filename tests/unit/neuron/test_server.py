"""The neuron's gRPC servicer in-process, in front of the simulated engine,
reached through cortex's NeuronClient: proto translation, typed errors across
the wire, cancellation and deadlines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from cortex.routing.client import NeuronClient
from neuraxis.core.errors import (
    ContextLengthExceededError,
    DeadlineExceededError,
    InternalError,
    ModelNotFoundError,
)
from neuraxis.core.v1 import neuron_pb2 as pb
from neuraxis.core.v1 import neuron_pb2_grpc as pb_grpc
from neuron.engine.sim import SimEngine, SimOptions
from neuron.server import NeuronServicer


@contextlib.asynccontextmanager
async def _serve(engine: SimEngine) -> AsyncIterator[NeuronClient]:
    server = grpc.aio.server()
    servicer = NeuronServicer(engine, pb.GPU_GENERATION_CPU)
    servicer.ready = True
    pb_grpc.add_NeuronServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = NeuronClient(f"127.0.0.1:{port}")
    try:
        yield client
    finally:
        await client.close()
        await server.stop(None)


@pytest.fixture
async def served() -> AsyncIterator[tuple[SimEngine, NeuronClient]]:
    engine = SimEngine(SimOptions(served_id="m", max_context_length=1024, itl_s=0.02))
    async with _serve(engine) as client:
        yield engine, client


def _request(
    content: str = "hello there", max_tokens: int = 5, model: str = "m"
) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id="r1",
        model=model,
        messages=[pb.ChatMessage(role="user", content=content)],
        sampling=pb.SamplingParams(max_tokens=max_tokens),
    )


async def test_generate_streams_deltas_then_finish_and_usage(
    served: tuple[SimEngine, NeuronClient],
) -> None:
    _, client = served
    responses = [r async for r in client.generate(_request(), timeout=10)]
    deltas = [c for r in responses for c in r.choices]
    assert "".join(d.text for d in deltas) == "tok0 tok1 tok2 tok3 tok4"
    assert all(d.finish_reason == pb.FINISH_REASON_UNSPECIFIED for d in deltas[:-1])
    assert deltas[-1].finish_reason == pb.FINISH_REASON_LENGTH
    last = responses[-1]
    assert last.HasField("usage") and not any(r.HasField("usage") for r in responses[:-1])
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (2, 5)


async def test_unknown_model_is_model_not_found(served: tuple[SimEngine, NeuronClient]) -> None:
    _, client = served
    with pytest.raises(ModelNotFoundError):
        [r async for r in client.generate(_request(model="other"), timeout=10)]


async def test_prompt_over_context_names_the_limits(served: tuple[SimEngine, NeuronClient]) -> None:
    _, client = served
    with pytest.raises(
        ContextLengthExceededError, match="maximum context length is 1024 tokens"
    ) as info:
        [r async for r in client.generate(_request(content="word " * 2000), timeout=10)]
    assert info.value.param == "messages"


async def test_cancelling_the_call_stops_the_engine(served: tuple[SimEngine, NeuronClient]) -> None:
    engine, client = served
    stream = client.generate(_request(max_tokens=500), timeout=30)
    await anext(stream)
    assert engine.load().running == 1
    await stream.aclose()  # what cortex does when its HTTP client goes away
    for _ in range(50):
        if engine.load().running == 0:
            break
        await asyncio.sleep(0.02)
    assert engine.load().running == 0


async def test_deadline_is_honoured(served: tuple[SimEngine, NeuronClient]) -> None:
    engine, client = served
    with pytest.raises(DeadlineExceededError):
        [r async for r in client.generate(_request(max_tokens=500), timeout=0.3)]
    for _ in range(50):
        if engine.load().running == 0:
            break
        await asyncio.sleep(0.02)
    assert engine.load().running == 0


async def test_engine_failure_is_internal_without_details() -> None:
    engine = SimEngine(SimOptions(served_id="m", fail_after_tokens=0))
    async with _serve(engine) as client:
        with pytest.raises(InternalError):
            [r async for r in client.generate(_request(), timeout=10)]
        info = await client.info(timeout=5)
        assert info.ready and info.engine == "sim" and [m.id for m in info.models] == ["m"]
