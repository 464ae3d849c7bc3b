"""A neuron's gRPC servicer in-process behind mutual TLS, for the unit tests
of the TLS wiring (the files come from `neuraxis tls init`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from axon.tls import TlsFiles
from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from neuron.engine.sim import SimEngine, SimOptions
from neuron.server import server_credentials
from neuron.servicer import NeuronServicer


def files(directory: Path, stem: str, ca_dir: Path | None = None) -> TlsFiles:
    """`stem`'s certificate and key in `directory`, trusting `ca_dir`'s CA
    (default: the same directory's)."""
    return TlsFiles(
        ca=(ca_dir or directory) / "ca.crt",
        cert=directory / f"{stem}.crt",
        key=directory / f"{stem}.key",
    )


@contextlib.asynccontextmanager
async def tls_neuron(tls: TlsFiles, served_id: str = "m") -> AsyncIterator[str]:
    """A ready neuron (sim engine) on a free port, requiring client
    certificates; yields its address."""
    server = grpc.aio.server()
    servicer = NeuronServicer(
        SimEngine(SimOptions(served_id=served_id, max_context_length=64)), pb.GPU_GENERATION_CPU
    )
    servicer.ready = True
    pb_grpc.add_NeuronServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_secure_port("127.0.0.1:0", server_credentials(tls))
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)
