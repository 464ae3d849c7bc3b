"""The neuron's gRPC servicer in-process, in front of the simulated engine,
reached through cortex's NeuronClient (and SessionClient: the cases marked
TRANSPORTS run over both token streams): proto translation, typed errors
across the wire, cancellation and deadlines; and the whole server (`serve`)
ending when its engine dies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from axon.errors import (
    ContextLengthExceededError,
    DeadlineExceededError,
    EngineDiedError,
    InternalError,
    ModelNotFoundError,
    UnavailableError,
)
from axon.v1 import neuron_pb2 as pb
from cortex.routing.client import NeuronClient
from cortex.routing.session_client import SessionClient
from harness.ports import free_port
from neuron.engine.base import EngineRequest, Output
from neuron.engine.sim import SimEngine, SimOptions
from neuron.server import (
    ENGINE_DEATH_GRACE_S,
    EXIT_ENGINE_DIED,
    serve,
)
from neuron.servicer import NeuronServicer
from tests.unit.neuron.sim_neuron import sim_neuron_client
from tests.unit.traced import spans

__all__ = ["spans"]

TRANSPORTS = pytest.mark.parametrize(
    "client_class", [NeuronClient, SessionClient], ids=["per-request", "batched"]
)


# Each case through both token streams: a Generate call per request, and the
# batched Session stream (cortex's [pool] token_stream).
@pytest.fixture(params=[NeuronClient, SessionClient], ids=["per-request", "batched"])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[SimEngine, NeuronClient]]:
    engine = SimEngine(SimOptions(served_id="m", max_context_length=1024, itl_s=0.02))
    async with sim_neuron_client(engine, request.param) as client:
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


async def test_the_sim_engine_takes_vllms_sampling_extensions_and_custom_tools(
    served: tuple[SimEngine, NeuronClient],
) -> None:
    _, client = served
    request = _request()
    request.sampling.MergeFrom(
        pb.SamplingParams(min_p=0.1, ignore_eos=True, min_tokens=2, stop_token_ids=[3])
    )
    request.tools.append(
        pb.Tool(
            name="pin", kind=pb.TOOL_KIND_CUSTOM, grammar="[0-9]+",
            grammar_syntax=pb.GRAMMAR_SYNTAX_REGEX,
        )
    )  # fmt: skip
    responses = [r async for r in client.generate(request, timeout=10)]
    assert responses[-1].usage.completion_tokens == 5


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
    assert isinstance(stream, AsyncGenerator)
    await stream.aclose()  # what cortex does when its HTTP client goes away
    await _until_idle(engine)


async def test_deadline_is_honoured(served: tuple[SimEngine, NeuronClient]) -> None:
    engine, client = served
    with pytest.raises(DeadlineExceededError):
        [r async for r in client.generate(_request(max_tokens=500), timeout=0.3)]
    await _until_idle(engine)


async def _until_idle(engine: SimEngine) -> None:
    """The engine has stopped its request within a second."""
    for _ in range(50):
        if engine.load().running == 0:
            break
        await asyncio.sleep(0.02)
    assert engine.load().running == 0


@TRANSPORTS
async def test_engine_failure_is_internal_without_details(
    client_class: type[NeuronClient],
) -> None:
    engine = SimEngine(SimOptions(served_id="m", fail_after_tokens=0))
    async with sim_neuron_client(engine, client_class) as client:
        with pytest.raises(InternalError):
            [r async for r in client.generate(_request(), timeout=10)]
        info = await client.info(timeout=5)
        assert info.ready and info.engine == "sim" and [m.id for m in info.models] == ["m"]


class _UnexpectedError(SimEngine):
    """An engine that fails with an error nobody translated, in its library's
    words (xgrammar's names its C++ source)."""

    def generate(self, request: EngineRequest) -> AsyncIterator[Output]:
        raise ValueError("/project/cpp/json_schema_converter.cc:4944: Unsupported type")


@TRANSPORTS
async def test_an_unexpected_error_is_internal_logged_with_the_request_id_not_sent(
    caplog: pytest.LogCaptureFixture, client_class: type[NeuronClient]
) -> None:
    engine = _UnexpectedError(SimOptions(served_id="m"))
    async with sim_neuron_client(engine, client_class) as client:
        with pytest.raises(InternalError) as raised:
            [r async for r in client.generate(_request(), timeout=10)]
    assert "json_schema_converter" not in raised.value.message
    (record,) = [r for r in caplog.records if r.getMessage() == "request failed"]
    assert getattr(record, "request_id", None) == "r1"
    assert record.exc_info is not None and "json_schema_converter" in str(record.exc_info[1])


async def test_info_reports_the_engines_batch_size_as_its_max_concurrency() -> None:
    async with sim_neuron_client(SimEngine(SimOptions(served_id="m", max_concurrency=7))) as client:
        assert (await client.info(timeout=5)).max_concurrency == 7


@TRANSPORTS
async def test_a_dead_engine_fails_the_calls_in_flight_naming_the_cause(
    client_class: type[NeuronClient],
) -> None:
    engine = SimEngine(SimOptions(served_id="m", itl_s=0.01, die_after_tokens=3))
    async with sim_neuron_client(engine, client_class) as client:
        with pytest.raises(UnavailableError, match="died after 3 tokens"):
            [r async for r in client.generate(_request(max_tokens=50), timeout=10)]


async def test_after_the_engine_died_calls_are_unavailable_and_info_not_ready(
    served: tuple[SimEngine, NeuronClient],
) -> None:
    engine, client = served
    engine.die("the engine core process exited")
    with pytest.raises(UnavailableError, match="the engine core process exited"):
        [r async for r in client.generate(_request(), timeout=10)]
    info = await client.info(timeout=5)
    assert not info.ready and not info.models


async def _health_statuses(address: str, seen: list[int]) -> None:
    """Every status the neuron's health service reports, until its stream ends."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for update in stub.Watch(health_pb2.HealthCheckRequest(service="")):
                seen.append(update.status)


@TRANSPORTS
async def test_a_dead_engine_ends_the_neuron_with_a_non_zero_status(
    client_class: type[NeuronClient],
) -> None:
    engine = SimEngine(SimOptions(served_id="m", itl_s=0.01))
    port = free_port()
    address = f"127.0.0.1:{port}"
    neuron = asyncio.create_task(serve(engine, "127.0.0.1", port, pb.GPU_GENERATION_CPU, 30.0))
    client = client_class(address)
    seen: list[int] = []
    watcher = None
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while not await client.serving(timeout=1.0):
            assert asyncio.get_running_loop().time() < deadline, "the neuron never served"
            await asyncio.sleep(0.05)
        watcher = asyncio.create_task(_health_statuses(address, seen))
        stream = client.generate(_request(max_tokens=500), timeout=30)
        await anext(stream)  # a call in flight when the engine dies
        engine.die("the engine core process exited")
        with pytest.raises(UnavailableError, match="the engine core process exited"):
            [r async for r in stream]
        # Well within the drain timeout (30 s): the neuron does not wait for one.
        assert await asyncio.wait_for(neuron, timeout=ENGINE_DEATH_GRACE_S + 5) == EXIT_ENGINE_DIED
        await asyncio.wait_for(watcher, timeout=5)
        assert seen[0] == health_pb2.HealthCheckResponse.SERVING
        assert health_pb2.HealthCheckResponse.NOT_SERVING in seen
    finally:
        await client.close()
        for task in (neuron, watcher):
            if task is not None and not task.done():
                task.cancel()


@TRANSPORTS
async def test_a_call_during_which_the_engine_died_says_so_by_its_kind(
    client_class: type[NeuronClient],
) -> None:
    engine = SimEngine(SimOptions(served_id="m", itl_s=0.01, die_after_tokens=3))
    async with sim_neuron_client(engine, client_class) as client:
        with pytest.raises(EngineDiedError):
            [r async for r in client.generate(_request(max_tokens=50), timeout=10)]


@TRANSPORTS
async def test_a_message_past_grpcs_default_4_mib_reaches_the_engine(
    client_class: type[NeuronClient],
) -> None:
    engine = SimEngine(SimOptions(served_id="m"))
    async with sim_neuron_client(engine, client_class) as client:
        request = pb.GenerateRequest(
            request_id="big",
            model="m",
            prompt="x" * (5 * 1024 * 1024),  # one word: one token
        )
        responses = [r async for r in client.generate(request, timeout=30)]
        assert responses[-1].usage.prompt_tokens == 1


@pytest.mark.parametrize("finished", [True, False], ids=["after-the-end", "midway"])
async def test_a_stream_its_caller_left_at_a_yield_is_logged_by_what_it_sent(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture, finished: bool
) -> None:
    """gRPC cancels a call whose caller went away, not the generator it was
    pulling, which asyncio's finalizer closes later in another task: OK when
    the last output (the usage) had been sent, CANCELLED before it; never
    INTERNAL (the trace's context variable once raised there)."""
    caplog.set_level(logging.INFO, "neuraxis.neuron")
    engine = SimEngine(SimOptions(served_id="m"))
    servicer = NeuronServicer(engine, pb.GPU_GENERATION_CPU)
    servicer.ready = True
    metadata = (("traceparent", f"00-{'ab' * 16}-{'cd' * 8}-01"),)
    stream = servicer.generation(_request(max_tokens=5), metadata)
    last = await asyncio.create_task(_read(stream, finished))  # the call's task
    assert last.HasField("usage") == finished
    await asyncio.create_task(stream.aclose())  # the finalizer's
    (line,) = [r for r in caplog.records if r.getMessage().startswith("Generate ")]
    assert line.getMessage() == f"Generate {'OK' if finished else 'CANCELLED'}"
    assert "neuron.generate" in {s.name for s in spans.get_finished_spans()}


async def _read(stream: AsyncIterator[pb.GenerateResponse], to_usage: bool) -> pb.GenerateResponse:
    """The stream's first message, or its last (the usage) when `to_usage`,
    the stream left open after it."""
    response = await anext(stream)
    while to_usage and not response.HasField("usage"):
        response = await anext(stream)
    return response
