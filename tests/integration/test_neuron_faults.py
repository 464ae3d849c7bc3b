"""The neuron under load and faults, with real vLLM (CPU) and SmolLM2.

One neuron is started the way a replica starts it (the replica actor's own
code, `cortex.cluster.replica.Replica`, run here without Ray on 127.0.0.1)
for both tests, in this order (the second ends it):
- while a 10,000-message conversation is being prepared (template,
  tokenisation, `truncation: auto`), Health and Info still answer within
  100 ms;
- when the engine core process dies, the request in flight fails with
  UNAVAILABLE naming the cause and the neuron exits non-zero within seconds.

A SIGKILLed neuron leaves no EngineCore behind: tests/integration/
test_embedded_shutdown.py, on the session's stack, where the neuron is a
replica's.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from axon.errors import UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.cluster.replica import Replica
from cortex.routing.client import NeuronClient
from harness.polling import wait_until
from neuron.server import EXIT_ENGINE_DIED

MODEL = "smollm2-135m-instruct"
START_TIMEOUT_S = 600
# The neuron's context: the conversation is truncated to it, then prefilled
# (~125 s at SmolLM2's own 8,192 tokens on 2 cores, seconds at this).
CONTEXT = 2048


@dataclass
class Neuron:
    replica: Replica
    address: str
    pid: int
    engine_cores: list[int]  # the EngineCore processes it started


def _engine_cores(pid: int) -> list[int]:
    children = psutil.Process(pid).children(recursive=True)
    return [p.pid for p in children if _is_engine_core(p)]


def _is_engine_core(process: psutil.Process) -> bool:
    try:
        return "EngineCore" in " ".join(process.cmdline()) or "EngineCor" in process.name()
    except psutil.Error:
        return False


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@contextmanager
def _started(name: str, log_dir: Path) -> Iterator[Neuron]:
    with pytest.MonkeyPatch.context() as env:
        # What the replica's node environment would hold; HF offline: no network.
        env.setenv("NEURAXIS_REPLICA_HOST", "127.0.0.1")
        env.setenv("NEURAXIS_REPLICA_LOG_DIR", str(log_dir))
        env.setenv("HF_HUB_OFFLINE", "1")
        env.setenv("TRANSFORMERS_OFFLINE", "1")
        replica = Replica(name)
        # The neuron's settings as the controller hands them over: environment.
        settings = {"NEURAXIS_NEURON_MODEL": MODEL, "NEURAXIS_NEURON_MAX_MODEL_LEN": str(CONTEXT)}
        started = asyncio.run(replica.start(settings, timeout_s=START_TIMEOUT_S))
        cores = _engine_cores(started["pid"])
        try:
            yield Neuron(replica, started["address"], started["pid"], cores)
        finally:
            asyncio.run(replica.drain(timeout_s=30))
            for pid in cores:  # whatever the test proved, leave no 700 MB orphan behind
                if not _gone(pid):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def neuron(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Neuron]:
    """One neuron for the probes while a conversation is prepared (which
    leave it running) and then the engine death that ends it, in that order:
    a vLLM neuron's start less than one each."""
    with _started("probed-then-engine-killed", tmp_path_factory.mktemp("neuron")) as started:
        yield started


def _conversation(turns: int) -> list[pb.ChatMessage]:
    lines = [
        "Could you remind me what we decided about the garden layout for next spring?",
        "We agreed on tomatoes along the south fence, herbs by the door and beans in the middle.",
    ]
    return [
        pb.ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"{lines[i % 2]} ({i})")
        for i in range(turns)
    ] + [pb.ChatMessage(role="user", content="And where do the strawberries go?")]


# Between two rounds of probes: a health checker's pace (50 rounds a second,
# far more often than any real one), not a flood that would itself keep the
# neuron's event loop busy.
PROBE_PAUSE_S = 0.02


async def _probe(address: str, until: asyncio.Task[object]) -> list[tuple[float, float]]:
    """Health.Check then Info, one after the other, until `until` is done:
    (start, latency) of each call."""
    samples: list[tuple[float, float]] = []
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        client = NeuronClient(address)
        try:
            while not until.done():
                started = time.perf_counter()
                await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
                samples.append((started, time.perf_counter() - started))
                started = time.perf_counter()
                await client.info(timeout=5)
                samples.append((started, time.perf_counter() - started))
                await asyncio.sleep(PROBE_PAUSE_S)
        finally:
            await client.close()
    return samples


def test_health_and_info_answer_within_100_ms_while_a_long_conversation_is_prepared(
    neuron: Neuron,
) -> None:
    request = pb.GenerateRequest(
        request_id="long-conversation",
        model=MODEL,
        messages=_conversation(10_000),
        sampling=pb.SamplingParams(max_tokens=1, temperature=0),
        truncate_oldest=True,
    )

    async def run() -> tuple[list[tuple[float, float]], float, float, pb.GenerateResponse]:
        client = NeuronClient(neuron.address)
        sent = time.perf_counter()
        first: list[float] = []

        async def generate() -> list[pb.GenerateResponse]:
            responses = []
            async for response in client.generate(request, timeout=300):
                first.append(time.perf_counter())
                responses.append(response)
            return responses

        try:
            call: asyncio.Task[object] = asyncio.create_task(generate())
            samples = await _probe(neuron.address, call)
            responses = await call
        finally:
            await client.close()
        assert isinstance(responses, list)
        return samples, sent, first[0], responses[-1]

    samples, sent, first_output, last = asyncio.run(run())
    # The calls made before the first output: the conversation was being
    # rendered, tokenised and truncated (then prefilled) meanwhile.
    during = sorted(latency for started, latency in samples if sent <= started < first_output)
    assert len(during) >= 20, f"only {len(during)} calls in {first_output - sent:.2f} s"
    p99 = during[int(0.99 * (len(during) - 1))]
    window = first_output - sent
    print(f"{len(during)} Health/Info calls in {window:.2f} s: p99 {p99 * 1000:.1f} ms")
    assert p99 < 0.1, f"p99 {p99 * 1000:.0f} ms over {len(during)} calls"
    assert 0 < last.usage.prompt_tokens <= CONTEXT - 1


def test_a_dead_engine_fails_the_request_in_flight_and_ends_the_neuron(neuron: Neuron) -> None:
    assert neuron.engine_cores, "no EngineCore process found under the neuron"
    request = pb.GenerateRequest(
        request_id="in-flight",
        model=MODEL,
        messages=[pb.ChatMessage(role="user", content="Count from 1 to 1000, one per line.")],
        sampling=pb.SamplingParams(max_tokens=1000, temperature=0),
    )

    async def run() -> None:
        client = NeuronClient(neuron.address)
        try:
            stream = client.generate(request, timeout=120)
            await anext(stream)
            for pid in neuron.engine_cores:
                os.kill(pid, signal.SIGKILL)
            with pytest.raises(UnavailableError, match="engine core"):
                async for _ in stream:
                    pass
        finally:
            await client.close()

    asyncio.run(run())
    killed = time.monotonic()

    def exited() -> bool:
        return not asyncio.run(neuron.replica.check())["running"]

    assert wait_until(exited, timeout_s=20), "the neuron still runs 20 s after its engine died"
    print(f"the neuron exited {time.monotonic() - killed:.1f} s after its engine core died")
    assert asyncio.run(neuron.replica.check())["exit_code"] == EXIT_ENGINE_DIED
