"""Many simulated neurons in one process: the replicas of the at-scale
benchmarks (routing_sim.py, gateway_capacity.py) on a 2-core machine.

Each replica is a real grpc.aio server with the neuron's own servicer and
health service in front of its own SimEngine (its own prefix cache and
prefill lane), on its own port; they share one process and one event loop.
That is honest for what is measured because the sim engine spends its time
in timers, not in computation: 16 neuron processes would cost 16 interpreters
and 16 gRPC stacks for the same sleeps, and the CPU they burned would be
taken from cortex, which is what the benchmarks measure.

    python -m harness.sim_farm --replicas 16 --served-id sim-model [--sim-... options]

prints one JSON line, {"addresses": [...]}, once every replica serves, and
runs until SIGTERM or SIGINT. `start_farm` runs it as a child process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from axon.generations import Generation
from axon.neuron_settings import NeuronSettings
from axon.process import stop_process_group
from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from neuron.main import build_engine
from neuron.servicer import NeuronServicer

READY_TIMEOUT_S = 60


@dataclass(frozen=True)
class FarmOptions:
    """How many replicas, and each one's settings under the names (and so
    the flags) of `neuraxis neuron serve --engine sim`."""

    replicas: int = 16
    served_id: str = "sim-model"
    sim_ttft_s: float = 0.01
    sim_itl_s: float = 0.02
    max_model_len: int = 32_768
    sim_prefix_cache_blocks: int = 0
    sim_block_tokens: int = 16
    sim_chars_per_token: int = 4
    sim_prefill_s_per_token: float = 0.0

    def neuron_settings(self) -> NeuronSettings:
        """One replica's settings."""
        settings = asdict(self)
        del settings["replicas"]
        return NeuronSettings(engine="sim", **settings)

    def args(self) -> list[str]:
        return [f"--{k.replace('_', '-')}={v}" for k, v in asdict(self).items()]


async def _serve_one(settings: NeuronSettings) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    # The neuron's own engine builder, so a replica here is what
    # `neuron serve` would run with the same settings.
    servicer = NeuronServicer(build_engine(settings, Generation.CPU), pb.GPU_GENERATION_CPU)
    servicer.ready = True
    health_servicer = health.aio.HealthServicer()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    pb_grpc.add_NeuronServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def serve(options: FarmOptions) -> None:
    served = [await _serve_one(options.neuron_settings()) for _ in range(options.replicas)]
    print(json.dumps({"addresses": [address for _, address in served]}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await asyncio.gather(*(server.stop(None) for server, _ in served))


@dataclass
class Farm:
    proc: subprocess.Popen[bytes]
    addresses: list[str]


@contextmanager
def start_farm(options: FarmOptions, log_path: Path) -> Iterator[Farm]:
    """The farm as a child process (its stderr to `log_path`), stopped at the end."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.sim_farm", *options.args()],
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the farm prints once every replica serves
        if not line:
            raise RuntimeError(f"the sim farm exited:\n{log_path.read_text()[-3000:]}")
        yield Farm(proc, json.loads(line.decode())["addresses"])
    finally:
        stop_process_group(proc, timeout_s=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name, value in asdict(FarmOptions()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    asyncio.run(serve(FarmOptions(**vars(parser.parse_args()))))


if __name__ == "__main__":
    main()
