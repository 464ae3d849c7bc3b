"""The neuron's servicer: each gRPC method of axon.v1.Neuron translated
between the protobuf messages and the engine interface (convert.py), with
its metrics, its span and its log line, and the engine's errors as gRPC
statuses carrying the error's kind (axon/errors.py's table).

server.py runs it: the gRPC server, health, the engine's start and death,
and the drain on stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc

from axon import tracing
from axon.adapters import AdapterSource
from axon.errors import (
    ERROR_METADATA_KEY,
    PARAM_METADATA_KEY,
    EngineDiedError,
    InternalError,
    NeuraxisError,
    UnavailableError,
    mapping_for,
)
from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from neuron import convert, metrics
from neuron import tracing as neuron_tracing
from neuron.engine.base import Engine, Output
from neuron.session import Metadata, Sessions

log = logging.getLogger("neuraxis.neuron")

_T = TypeVar("_T")


class InFlight:
    """The Generate and Embed calls being served: a neuron whose engine died
    exits as soon as they have had their error (health watchers, which never
    end, are not counted)."""

    def __init__(self) -> None:
        self.count = 0
        self._none = asyncio.Event()
        self._none.set()

    def enter(self) -> None:
        self.count += 1
        self._none.clear()

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            self._none.set()

    async def wait_none(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._none.wait(), timeout=timeout_s)


class _Call:
    """One gRPC call: its metrics and its log line (sizes, never text)."""

    def __init__(self, method: str, model: str, request_id: str, in_flight: InFlight) -> None:
        self.method, self.model, self.request_id = method, model, request_id
        self._in_flight = in_flight
        in_flight.enter()
        self.started = time.perf_counter()
        self.code = "OK"
        self.fields: dict[str, object] = {}
        self.finished = False  # its last output (the usage) has been made

    def failed(self, error: BaseException) -> None:
        if isinstance(error, NeuraxisError):
            self.code = mapping_for(error).grpc_code
        elif isinstance(error, asyncio.CancelledError | GeneratorExit):
            self.code = "CANCELLED"
        else:
            self.code = "INTERNAL"

    def done(self) -> None:
        self._in_flight.leave()
        seconds = time.perf_counter() - self.started
        metrics.record_call(self.method, self.model, self.code, seconds)
        log.info(
            "%s %s",
            self.method,
            self.code,
            extra={
                "request_id": self.request_id,
                "model": self.model,
                "code": self.code,
                "duration_s": round(seconds, 4),
                **self.fields,
            },
        )


@dataclass(frozen=True)
class _Method:
    """What differs between the Generate and Embed calls' handling."""

    name: str
    failed_line: str  # logged with the traceback of an unexpected error
    # An UNAVAILABLE raised while the engine was dying is reported as
    # engine_died (`_as_death`); Embed has always reported it as it came.
    says_death: bool


GENERATE = _Method("Generate", "request failed", says_death=True)
EMBED = _Method("Embed", "embed request failed", says_death=False)
TOKENIZE = _Method("Tokenize", "tokenize request failed", says_death=False)
DETOKENIZE = _Method("Detokenize", "detokenize request failed", says_death=False)
# The calls the servicer serves through `_serving`.
Served = pb.GenerateRequest | pb.EmbedRequest | pb.TokenizeRequest | pb.DetokenizeRequest


class NeuronServicer(pb_grpc.NeuronServicer):
    def __init__(self, engine: Engine, generation: pb.GpuGeneration, metrics_port: int = 0) -> None:
        self._engine = engine
        self._generation = generation
        self._metrics_port = metrics_port
        self.ready = False
        self.in_flight = InFlight()
        # The batched token stream's sessions, their requests served by `generation`.
        self.sessions = Sessions(self.generation)

    def _model_label(self, model: str) -> str:
        return model if any(m.id == model for m in self._engine.models()) else "unknown"

    @contextlib.asynccontextmanager
    async def _call(self, method: _Method, request: Served) -> AsyncIterator[_Call]:
        """One request: refused while loading, draining or once the engine
        has died, counted and logged, its failure raised as the typed error
        the caller sees (an unexpected one logged and made INTERNAL)."""
        call = _Call(
            method.name, self._model_label(request.model), request.request_id, self.in_flight
        )
        try:
            if not self.ready:
                raise UnavailableError("the neuron is still loading its model")
            _check_alive(self._engine)
            yield call
        except NeuraxisError as e:
            call.failed(e)
            if method.says_death:
                death = _as_death(self._engine, e)
                if death is not e:
                    raise death from None
            raise
        except asyncio.CancelledError as e:
            # The caller went away or its deadline passed: the engine's
            # generator has already aborted the request on the way out.
            call.failed(e)
            raise
        except GeneratorExit as e:
            # The caller went away while the stream waited at a yield: gone
            # before the last output, the call was cancelled; after it, all
            # it asked for was sent and the call is OK.
            if not call.finished:
                call.failed(e)
            raise
        except Exception as e:
            call.failed(e)
            log.exception(method.failed_line, extra={"request_id": request.request_id})
            raise InternalError("internal error in the neuron") from None
        finally:
            call.done()

    @contextlib.asynccontextmanager
    async def _serving(
        self,
        method: _Method,
        request: Served,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[_Call]:
        """One gRPC call of `_call`, its typed error ending it as a gRPC status."""
        try:
            async with self._call(method, request) as call:
                yield call
        except NeuraxisError as e:
            await _abort(context, e)

    async def generation(
        self, request: pb.GenerateRequest, metadata: Metadata
    ) -> AsyncGenerator[pb.GenerateResponse, None]:
        """One request's stream, raising its typed error: what Generate and
        a session's request (session.py) both serve. `metadata`: the
        caller's (its trace context)."""
        traced = neuron_tracing.traced(GENERATE.name, metadata, request)
        async with self._call(GENERATE, request) as call:
            with traced as trace:
                if trace is not None:
                    call.fields["trace_id"] = trace.trace_id
                started = False
                async for output in self._engine.generate(convert.engine_request(request)):
                    if trace is not None and not started:
                        started = True
                        trace.first_output()
                    if output.usage is not None:
                        call.finished = True
                        call.fields = {
                            "prompt_tokens": output.usage.prompt_tokens,
                            "completion_tokens": output.usage.completion_tokens,
                            "cached_prompt_tokens": output.usage.cached_prompt_tokens,
                        }
                        if trace is not None:
                            call.fields["trace_id"] = trace.trace_id
                            trace.finished(_usage_attributes(output))
                    yield convert.generate_response(output)

    async def Generate(  # noqa: N802 (gRPC method name)
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        metadata = context.invocation_metadata() or ()
        try:
            async with contextlib.aclosing(self.generation(request, metadata)) as responses:
                async for response in responses:
                    yield response
        except NeuraxisError as e:
            await _abort(context, e)

    async def Session(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.SessionUp], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.SessionDown]:
        """The batched token stream (session.py): its requests each served
        by `generation`."""
        async for batch in self.sessions.serve(request_iterator):
            yield batch

    async def _unary(
        self,
        method: _Method,
        request: Served,
        context: grpc.aio.ServicerContext,
        work: Callable[[], Awaitable[_T]],
        fields: Callable[[_T], dict[str, object]],
    ) -> _T:
        """A unary call: `work` traced and served, `fields` its log line's."""
        traced = neuron_tracing.traced(method.name, context.invocation_metadata() or (), request)
        async with self._serving(method, request, context) as call:
            with traced:
                result = await work()
            call.fields = fields(result)
        return result

    async def Embed(  # noqa: N802
        self, request: pb.EmbedRequest, context: grpc.aio.ServicerContext
    ) -> pb.EmbedResponse:
        result = await self._unary(
            EMBED,
            request,
            context,
            lambda: self._engine.embed(convert.embed_request(request)),
            lambda result: {"inputs": len(request.inputs), "prompt_tokens": result.prompt_tokens},
        )
        return pb.EmbedResponse(
            embeddings=[pb.Embedding(values=v) for v in result.embeddings],
            prompt_tokens=result.prompt_tokens,
        )

    async def Tokenize(  # noqa: N802
        self, request: pb.TokenizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.TokenizeResponse:
        result = await self._unary(
            TOKENIZE,
            request,
            context,
            lambda: self._engine.tokenize(convert.tokenize_request(request)),
            lambda result: {"tokens": len(result.tokens)},
        )
        return convert.tokenize_response(result)

    async def Detokenize(  # noqa: N802
        self, request: pb.DetokenizeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DetokenizeResponse:
        text = await self._unary(
            DETOKENIZE,
            request,
            context,
            lambda: self._engine.detokenize(request.model, list(request.tokens)),
            lambda _text: {"tokens": len(request.tokens)},
        )
        return pb.DetokenizeResponse(prompt=text)

    async def Info(  # noqa: N802
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.InfoResponse:
        ready = self.ready and self._engine.healthy()
        models = [convert.model_info(m) for m in (self._engine.models() if ready else [])]
        return pb.InfoResponse(
            models=models,
            engine=self._engine.description,
            generation=self._generation,
            ready=ready,
            metrics_port=self._metrics_port,
            max_concurrency=self._engine.max_concurrency() if ready else 0,
            adapters=self._engine.held_adapters() if ready else [],
            max_adapters=self._engine.max_adapters(),
        )

    async def Load(  # noqa: N802
        self, request: pb.LoadRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoadResponse:
        load = self._engine.load()
        return pb.LoadResponse(
            running=load.running,
            waiting=load.waiting,
            kv_cache_usage=load.kv_cache_usage,
            adapters=self._engine.held_adapters(),
        )

    async def LoadAdapter(  # noqa: N802
        self, request: pb.LoadAdapterRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoadAdapterResponse:
        source = AdapterSource(request.id, request.source)
        await self._adapter_call(context, "load", request.id, self._engine.load_adapter(source))
        return pb.LoadAdapterResponse()

    async def UnloadAdapter(  # noqa: N802
        self, request: pb.UnloadAdapterRequest, context: grpc.aio.ServicerContext
    ) -> pb.UnloadAdapterResponse:
        unload = self._engine.unload_adapter(request.id)
        await self._adapter_call(context, "unload", request.id, unload)
        return pb.UnloadAdapterResponse()

    async def _adapter_call(
        self,
        context: grpc.aio.ServicerContext,
        what: str,
        adapter_id: str,
        work: Coroutine[Any, Any, None],
    ) -> None:
        """An adapter's load or unload, its errors as gRPC statuses."""
        try:
            if not self.ready:
                work.close()
                raise UnavailableError("the neuron is still loading its model")
            await work
        except NeuraxisError as e:
            await _abort(context, e)
        except Exception:
            log.exception("adapter %s failed: %s", what, adapter_id)
            await _abort(context, InternalError(f"the adapter's {what} failed in the neuron"))
        log.info("adapter %s: %s", what, adapter_id)


def _usage_attributes(output: Output) -> tracing.Attributes:
    assert output.usage is not None
    reasons = [c.finish_reason.value for c in output.choices if c.finish_reason is not None]
    return {
        "gen_ai.usage.input_tokens": output.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": output.usage.completion_tokens,
        "gen_ai.response.finish_reasons": reasons,
    }


def _check_alive(engine: Engine) -> None:
    cause = engine.death_cause()
    if cause is not None or not engine.healthy():
        raise EngineDiedError(f"the neuron's engine has died: {cause or 'unknown cause'}")


def _as_death(engine: Engine, error: NeuraxisError) -> NeuraxisError:
    """An UNAVAILABLE raised while the engine was dying says so by its kind:
    cortex retries a request during which an engine died at most once."""
    if isinstance(error, UnavailableError) and engine.death_cause() is not None:
        return EngineDiedError(error.message)
    return error


async def _abort(context: grpc.aio.ServicerContext, error: NeuraxisError) -> NoReturn:
    metadata: tuple[tuple[str, str], ...] = ((ERROR_METADATA_KEY, error.kind),)
    if error.param:
        metadata += ((PARAM_METADATA_KEY, error.param),)
    code = getattr(grpc.StatusCode, mapping_for(error).grpc_code)
    await context.abort(code, error.message, trailing_metadata=metadata)
    raise AssertionError("unreachable: context.abort raises")
