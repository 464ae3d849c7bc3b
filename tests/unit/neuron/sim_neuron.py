"""A neuron's gRPC server over a sim engine, ready at once, on a free
loopback port, and cortex's client of it: what tests/unit/neuron's server,
tokenizer and event-loop tests call."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc

from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from cortex.routing.client import NeuronClient
from neuron.engine.sim import SimEngine
from neuron.server import new_server
from neuron.servicer import NeuronServicer


async def start_sim_neuron(engine: SimEngine, port: int = 0) -> tuple[grpc.aio.Server, int]:
    """The started server and its port (`port`, or a free one); the caller
    stops it."""
    server = new_server()
    servicer = NeuronServicer(engine, pb.GPU_GENERATION_CPU)
    servicer.ready = True
    pb_grpc.add_NeuronServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, port


@contextlib.asynccontextmanager
async def sim_neuron_client(
    engine: SimEngine, client_class: type[NeuronClient] = NeuronClient
) -> AsyncIterator[NeuronClient]:
    """cortex's client of a sim neuron over `engine` (NeuronClient, or
    SessionClient for the batched token stream); both closed at the end."""
    server, port = await start_sim_neuron(engine)
    client = client_class(f"127.0.0.1:{port}")
    try:
        yield client
    finally:
        await client.close()
        await server.stop(None)
