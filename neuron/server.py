"""The neuron's gRPC server: the servicer (servicer.py) that translates
between the axon.v1 protobuf messages and the engine interface, plus the
standard grpc.health.v1 service; the engine's start, its death, and the
drain on stop.

The server starts listening before the engine has loaded, reporting
NOT_SERVING (and `ready: false` in Info) until it has, so that cortex and
operators can tell "loading" from "down".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from axon import tracing
from axon.grpc_limits import MESSAGE_OPTIONS
from axon.process import StopRequested
from axon.tls import TlsFiles
from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from neuron import metrics
from neuron.engine.base import Engine
from neuron.servicer import NeuronServicer

log = logging.getLogger("neuraxis.neuron")

SERVICE_NAME = "axon.v1.Neuron"

# The exit status of a neuron whose engine died (EX_SOFTWARE): non-zero, so
# that systemd or the controller starts a new one at once.
EXIT_ENGINE_DIED = 70
# How often the neuron looks whether its engine is still alive.
ENGINE_WATCH_INTERVAL_S = 0.5
# How long, once the engine has died, its in-flight calls get to receive
# their error before the server stops (they fail at once; this is a bound);
# any still running then are cancelled.
ENGINE_DEATH_GRACE_S = 5.0


async def _engine_death(engine: Engine, stop: asyncio.Event) -> str | None:
    """Wait until the engine dies (return why) or the neuron is stopped (None)."""
    while not stop.is_set():
        cause = engine.death_cause()
        if cause is not None:
            return cause
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=ENGINE_WATCH_INTERVAL_S)
    return None


async def _set_health(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, status)


def new_server() -> grpc.aio.Server:
    """The gRPC server, taking messages as large as cortex may send
    (axon/grpc_limits.py says why)."""
    return grpc.aio.server(options=MESSAGE_OPTIONS)


async def _listen(
    servicer: NeuronServicer,
    health_servicer: health.aio.HealthServicer,
    host: str,
    port: int,
    credentials: grpc.ServerCredentials | None,
) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC server (NOT_SERVING until the engine has loaded), over
    mutual TLS with `credentials`, otherwise plaintext."""
    server = new_server()
    pb_grpc.add_NeuronServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    await _set_health(health_servicer, serving=False)
    if credentials is None:
        bound = server.add_insecure_port(f"{host}:{port}")
    else:
        bound = server.add_secure_port(f"{host}:{port}", credentials)
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    await server.start()
    log.info(
        "neuron listening on %s:%d (%s), loading the engine",
        host,
        bound,
        "plaintext" if credentials is None else "mutual TLS",
    )
    return server, bound


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Mutual TLS: the neuron shows its certificate and takes only clients
    whose certificate chains to the CA; a plaintext or certificate-less
    client fails the handshake before any call."""
    material = files.read()
    return grpc.ssl_server_credentials(
        [(material.key, material.cert)],
        root_certificates=material.ca,
        require_client_auth=True,
    )


async def serve(
    engine: Engine,
    host: str,
    port: int,
    generation: pb.GpuGeneration,
    drain_timeout_s: float,
    metrics_port: int = 0,
    credentials: grpc.ServerCredentials | None = None,
) -> int:
    """Serve until SIGTERM or SIGINT, then drain: stop accepting calls, let
    in-flight ones finish for up to drain_timeout_s, and stop the engine.
    With `credentials` the port speaks only TLS (server_credentials).

    Returns the process's exit status: 0 after a stop, EXIT_ENGINE_DIED when
    the engine died (health NOT_SERVING at once, the in-flight calls fail
    with UNAVAILABLE naming the cause, and the neuron ends within seconds: a
    dead engine never recovers, and a neuron that stayed up would only fail
    health checks until someone gave up on it)."""
    if metrics_port:
        metrics.serve_metrics(host, metrics_port)
    servicer = NeuronServicer(engine, generation, metrics_port)
    health_servicer = health.aio.HealthServicer()
    server, bound = await _listen(servicer, health_servicer, host, port, credentials)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    loader = asyncio.create_task(engine.start())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({loader, stopper}, return_when=asyncio.FIRST_COMPLETED)
    grace, status = drain_timeout_s, 0
    if loader.done() and loader.exception() is None:
        servicer.ready = True
        await _set_health(health_servicer, serving=True)
        models = ", ".join(m.id for m in engine.models())
        log.info("neuron ready on %s:%d serving %s (%s)", host, bound, models, engine.description)
        cause = await _engine_death(engine, stop)
        if cause is not None:
            log.error("the engine has died (%s): NOT_SERVING, and the neuron exits", cause)
            await _set_health(health_servicer, serving=False)
            await servicer.in_flight.wait_none(ENGINE_DEATH_GRACE_S)
            grace, status = 0.0, EXIT_ENGINE_DIED
    log.info("neuron stopping: draining for up to %.0f s", grace)
    servicer.sessions.drain()  # sessions end with their requests, as calls do
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace=grace)
    if not loader.done():
        loader.cancel()
    await engine.shutdown()
    tracing.shutdown()  # the last calls' spans exported
    stopper.cancel()
    if loader.done() and not loader.cancelled() and loader.exception() is not None:
        if isinstance(loader.exception(), StopRequested):
            log.info("neuron stopped while its engine loaded")
            return 0
        raise loader.exception()  # type: ignore[misc]
    log.info("neuron stopped (exit status %d)", status)
    return status
