"""The neuron's gRPC server: a thin servicer that translates between the
neuraxis.v1 protobuf messages and the engine interface, plus the standard
grpc.health.v1 service.

The server starts listening before the engine has loaded, reporting
NOT_SERVING (and `ready: false` in Info) until it has, so that cortex and
operators can tell "loading" from "down".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from neuraxis.errors import (
    ERROR_METADATA_KEY,
    PARAM_METADATA_KEY,
    InternalError,
    NeuraxisError,
    UnavailableError,
    mapping_for,
)
from neuraxis.v1 import neuron_pb2 as pb
from neuraxis.v1 import neuron_pb2_grpc as pb_grpc
from neuron.engine.base import Delta, Engine, EngineRequest, FinishReason, Message, Sampling
from neuron.models.bundled import ModelTask

log = logging.getLogger("neuraxis.neuron")

SERVICE_NAME = "neuraxis.v1.Neuron"

_FINISH_TO_PB = {
    FinishReason.STOP: pb.FINISH_REASON_STOP,
    FinishReason.LENGTH: pb.FINISH_REASON_LENGTH,
    FinishReason.ABORT: pb.FINISH_REASON_ABORT,
}
_TASK_TO_PB = {ModelTask.GENERATE: pb.MODEL_TASK_GENERATE, ModelTask.EMBED: pb.MODEL_TASK_EMBED}


class NeuronServicer(pb_grpc.NeuronServicer):
    def __init__(self, engine: Engine, generation: pb.GpuGeneration) -> None:
        self._engine = engine
        self._generation = generation
        self.ready = False

    async def Generate(  # noqa: N802 (gRPC method name)
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        try:
            if not self.ready:
                raise UnavailableError("the neuron is still loading its model")
            if not self._engine.healthy():
                raise UnavailableError("the neuron's engine has died")
            async for delta in self._engine.generate(_engine_request(request)):
                yield _response(delta)
        except NeuraxisError as e:
            await _abort(context, e)
        except asyncio.CancelledError:
            # The caller went away or its deadline passed: the engine's
            # generator has already aborted the request on the way out.
            log.info("request %s cancelled by the caller", request.request_id)
            raise
        except Exception:
            log.exception("request %s failed", request.request_id)
            await _abort(context, InternalError("internal error in the neuron"))

    async def Info(  # noqa: N802
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.InfoResponse:
        ready = self.ready and self._engine.healthy()
        models = [
            pb.ModelInfo(
                id=m.id,
                max_context_length=m.max_context_length,
                task=_TASK_TO_PB[m.task],
                created=m.created,
            )
            for m in (self._engine.models() if ready else [])
        ]
        return pb.InfoResponse(
            models=models,
            engine=self._engine.description,
            generation=self._generation,
            ready=ready,
        )

    async def Load(  # noqa: N802
        self, request: pb.LoadRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoadResponse:
        load = self._engine.load()
        return pb.LoadResponse(running=load.running, waiting=load.waiting)


def _engine_request(request: pb.GenerateRequest) -> EngineRequest:
    s = request.sampling
    sampling = Sampling(
        max_tokens=s.max_tokens if s.HasField("max_tokens") else None,
        temperature=s.temperature if s.HasField("temperature") else None,
        top_p=s.top_p if s.HasField("top_p") else None,
        top_k=s.top_k if s.HasField("top_k") else None,
        seed=s.seed if s.HasField("seed") else None,
        stop=tuple(s.stop),
        presence_penalty=s.presence_penalty if s.HasField("presence_penalty") else None,
        frequency_penalty=s.frequency_penalty if s.HasField("frequency_penalty") else None,
    )
    messages = tuple(
        Message(role=m.role, content=m.content, name=m.name if m.HasField("name") else None)
        for m in request.messages
    )
    return EngineRequest(
        request_id=request.request_id, model=request.model, messages=messages, sampling=sampling
    )


def _response(delta: Delta) -> pb.GenerateResponse:
    if delta.finish_reason is None:
        return pb.GenerateResponse(text=delta.text)
    usage = delta.usage
    return pb.GenerateResponse(
        text=delta.text,
        finish_reason=_FINISH_TO_PB[delta.finish_reason],
        usage=pb.Usage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_prompt_tokens=usage.cached_prompt_tokens,
        )
        if usage
        else None,
    )


async def _abort(context: grpc.aio.ServicerContext, error: NeuraxisError) -> None:
    metadata: tuple[tuple[str, str], ...] = ((ERROR_METADATA_KEY, error.kind),)
    if error.param:
        metadata += ((PARAM_METADATA_KEY, error.param),)
    code = getattr(grpc.StatusCode, mapping_for(error).grpc_code)
    await context.abort(code, error.message, trailing_metadata=metadata)


async def _watch_engine(
    engine: Engine, health_servicer: health.aio.HealthServicer, stop: asyncio.Event
) -> None:
    """Until stopped, report NOT_SERVING once the engine has died, so that
    health checks and cortex stop sending it requests."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        if not stop.is_set() and not engine.healthy():
            log.error("the engine has died; reporting NOT_SERVING")
            for name in ("", SERVICE_NAME):
                await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
            await stop.wait()


async def serve(
    engine: Engine,
    host: str,
    port: int,
    generation: pb.GpuGeneration,
    drain_timeout_s: float,
) -> None:
    """Serve until SIGTERM or SIGINT, then drain: stop accepting calls, let
    in-flight ones finish for up to drain_timeout_s, and stop the engine."""
    server = grpc.aio.server()
    servicer = NeuronServicer(engine, generation)
    pb_grpc.add_NeuronServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    await server.start()
    log.info("neuron listening on %s:%d, loading the engine", host, bound)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    loader = asyncio.create_task(engine.start())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({loader, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if loader.done() and loader.exception() is None:
        servicer.ready = True
        for name in ("", SERVICE_NAME):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        models = ", ".join(m.id for m in engine.models())
        log.info("neuron ready on %s:%d serving %s (%s)", host, bound, models, engine.description)
        await _watch_engine(engine, health_servicer, stop)
    log.info("neuron stopping: draining for up to %.0f s", drain_timeout_s)
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace=drain_timeout_s)
    if not loader.done():
        loader.cancel()
    await engine.shutdown()
    stopper.cancel()
    if loader.done() and not loader.cancelled() and loader.exception() is not None:
        raise loader.exception()  # type: ignore[misc]
