"""The neuron's event loop: uvloop, as vLLM's own server runs, with the gRPC
servicer streaming on it."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc
import uvloop

from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from harness.polling import wait_until
from harness.ports import free_port
from harness.procs import Proc
from neuron.engine.sim import SimEngine, SimOptions
from neuron.main import run_event_loop
from tests.unit.neuron.sim_neuron import start_sim_neuron


def test_the_neuron_runs_on_uvloop() -> None:
    async def main() -> int:
        return 1 if isinstance(asyncio.get_running_loop(), uvloop.Loop) else 0

    assert run_event_loop(main()) == 1


def test_generate_streams_on_the_neurons_loop() -> None:
    async def main() -> int:
        engine = SimEngine(SimOptions(served_id="m", max_context_length=1024, itl_s=0.0))
        server, port = await start_sim_neuron(engine)
        request = pb.GenerateRequest(
            request_id="r1",
            model="m",
            messages=[pb.ChatMessage(role="user", content="hello")],
            sampling=pb.SamplingParams(max_tokens=7),
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = pb_grpc.NeuronStub(channel)  # type: ignore[no-untyped-call]
                responses = [r async for r in stub.Generate(request, timeout=10)]
        finally:
            await server.stop(None)
        return int(responses[-1].usage.completion_tokens)

    assert run_event_loop(main()) == 7


def test_a_neuron_stopped_while_its_engine_loads_exits_at_once(tmp_path: Path) -> None:
    # The sim engine's start holds the event loop for a minute, as vLLM's
    # engine build does; SIGTERM meanwhile ends the neuron, cleanly.
    port = free_port()
    args = ["neuron", "serve", "--engine", "sim", "--port", str(port), "--sim-load-s", "120"]
    proc = Proc(args, tmp_path / "neuron.log")
    try:
        assert wait_until(lambda: "sim engine: loading" in proc.log_tail(), 30), proc.log_tail()
        stopped = time.monotonic()
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(timeout=15) == 0, proc.log_tail()
        assert time.monotonic() - stopped < 15
        assert "neuron stopped while its engine loaded" in proc.log_tail()
    finally:
        proc.stop(signal.SIGKILL, timeout=5)
