"""The end of the session's `neuraxis up` (the shared stack, so these run
last, in this order: tests/conftest.py orders every `ends_stack` test after
the others).

- When the embedding neuron's engine core dies under a request, that request
  fails with UNAVAILABLE naming the cause (not a hang), cortex answers 503
  with Retry-After, and the neuron exits within seconds (its exit status,
  EXIT_ENGINE_DIED: tests/unit/neuron/test_server.py); the chat replica
  serves on.
- The controller starts another embedding replica; SIGKILLed while vLLM
  loads, its neuron leaves no vLLM EngineCore behind.
- Ctrl-C (SIGINT to the terminal's process
  group) during a streamed request ends the stream with its terminal events
  within cortex's short graceful shutdown (harness/stacks.py), and `up`
  stops without a traceback and leaves no process behind, the engines'
  included."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

import httpx
import psutil
import pytest

from axon.errors import UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.routing.client import NeuronClient
from harness.polling import wait_until
from harness.stacks import EMBEDDING_MODEL, MODEL, SHUTDOWN_GRACE_S, Stack
from harness.streamed_chat import greedy_chat

pytestmark = [pytest.mark.integration, pytest.mark.ends_stack]


def _neuron(up: psutil.Process, model: str) -> psutil.Process:
    """The replica's live `neuron serve` for `model`: a replica's neuron gets
    its settings as NEURAXIS_NEURON_* variables. (A killed one can linger as
    a zombie until its actor reaps it.)"""
    for p in up.children(recursive=True):
        try:
            if (
                "serve" in p.cmdline()
                and p.environ().get("NEURAXIS_NEURON_SERVED_ID") == model
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                return p
        except psutil.Error:
            continue
    raise LookupError(f"no neuron serves {model}")


def _engine_cores(neuron: psutil.Process) -> list[psutil.Process]:
    # vLLM titles it VLLM::EngineCore; the kernel keeps 15 characters of
    # that as the process name, and the command line shows the title only
    # when setproctitle could rewrite it.
    return [
        p
        for p in neuron.children(recursive=True)
        if "EngineCore" in " ".join(p.cmdline()) or "EngineCor" in p.name()
    ]


def _gone(process: psutil.Process) -> bool:
    try:
        return bool(process.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _chat(stack: Stack, content: str = "Hello") -> httpx.Response:
    body = {"model": MODEL, "temperature": 0, "messages": [{"role": "user", "content": content}]}
    return httpx.post(f"{stack.base_url}/v1/chat/completions", json=body, timeout=60)


def _embedding(stack: Stack) -> httpx.Response:
    body = {"model": EMBEDDING_MODEL, "input": "Hello"}
    return httpx.post(f"{stack.base_url}/v1/embeddings", json=body, timeout=60)


# An embedding request that keeps the engine busy for seconds: 2,048 inputs
# of 250 token ids (the engine's work alone: no tokenising on the neuron).
LONG_EMBEDDING = pb.EmbedRequest(
    request_id="in-flight",
    model=EMBEDDING_MODEL,
    inputs=[pb.EmbedInput(tokens=pb.TokenIds(ids=[1000 + i % 7] * 250)) for i in range(2048)],
)


def test_a_dead_engine_fails_the_request_in_flight_and_ends_the_neuron(stack: Stack) -> None:
    """On the embedding replica, so that the chat replica serves the last
    test: on the chat replica, the last test waited 90-115 s for the
    controller's replacement to load vLLM again. That a replacement serves
    is test_cluster's test_a_crashed_neuron_is_replaced_..., where the same
    controller replaces a neuron that exited."""
    r = _chat(stack, "What is the capital of France?")
    assert "Paris" in r.json()["choices"][0]["message"]["content"]
    up = psutil.Process(stack.proc.popen.pid)
    tree = up.children(recursive=True)
    # Ray, cortex, the replicas' neurons and vLLM's engine cores at least.
    assert len(tree) >= 5
    names = " ".join(" ".join(p.cmdline()) for p in tree)
    assert "neuron" in names and "cortex" in names and "raylet" in names

    neuron = _neuron(up, EMBEDDING_MODEL)
    cores = _engine_cores(neuron)
    assert cores, "no EngineCore process found under the embedding neuron"

    async def run() -> None:
        client = NeuronClient(stack.embedding_address)
        try:
            call = asyncio.ensure_future(client.embed(LONG_EMBEDDING, timeout=120))
            # In the engine's hands once its scheduler counts it.
            while True:
                load = await client.load(timeout=5)
                if load.running or load.waiting:
                    break
                assert not call.done(), "the long embedding ended before the engine was killed"
                await asyncio.sleep(0.05)
            for core in cores:
                core.kill()
            with pytest.raises(UnavailableError, match="engine core"):
                await call
        finally:
            await client.close()

    asyncio.run(run())
    killed = time.monotonic()
    refused = _embedding(stack)
    assert refused.status_code == 503 and "retry-after" in refused.headers, refused.text
    assert wait_until(lambda: _gone(neuron), timeout_s=20), (
        "the neuron still runs 20 s after its engine died"
    )
    print(f"the neuron exited {time.monotonic() - killed:.1f} s after its engine core died")
    assert _chat(stack).status_code == 200  # the other replica serves on


def test_no_engine_core_outlives_a_sigkilled_neuron(stack: Stack) -> None:
    """The controller's replacement for the embedding replica, killed once
    its engine core has started (while vLLM loads the model)."""
    up = psutil.Process(stack.proc.popen.pid)
    began = time.monotonic()
    cores: list[psutil.Process] = []

    def replacement_has_an_engine_core() -> bool:
        nonlocal cores
        try:
            cores = _engine_cores(_neuron(up, EMBEDDING_MODEL))
        except (LookupError, psutil.Error):
            return False
        return bool(cores)

    assert wait_until(replacement_has_an_engine_core, timeout_s=180, interval_s=0.5), (
        stack.proc.log_tail()
    )
    neuron = _neuron(up, EMBEDDING_MODEL)
    print(f"the replacement's engine core ran {time.monotonic() - began:.0f} s after this began")
    os.kill(neuron.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(cores, timeout=10)
    assert alive == [], "an EngineCore outlived its SIGKILLed neuron"


def _stream_lines(stack: Stack, started: threading.Event, lines: list[str]) -> None:
    body = greedy_chat(MODEL, "Count from 1 to 5000, separated by commas.", 4000)
    url = f"{stack.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line:
                lines.append(line)
                if '"content":"' in line and '"content":""' not in line:
                    started.set()


def test_ctrl_c_during_a_stream_ends_it_and_stops_everything(stack: Stack) -> None:
    up = psutil.Process(stack.proc.popen.pid)
    started, lines = threading.Event(), list[str]()
    client = threading.Thread(target=_stream_lines, args=(stack, started, lines))
    client.start()
    assert started.wait(timeout=60), lines
    # Whatever started meanwhile (the embedding replica's replacement,
    # loading now) must stop too.
    tree = up.children(recursive=True)
    os.killpg(stack.proc.popen.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    client.join(timeout=SHUTDOWN_GRACE_S + 60)
    assert not client.is_alive()
    assert stack.proc.popen.wait(timeout=120) == 0
    text = stack.terminal.wait_for(r"^neuraxis: stopped$", 10, stack.proc.alive)
    # The embedding replica the controller started after the last test is
    # likely still building its vLLM engine (90-115 s): stopped meanwhile it
    # ends within seconds (axon.process.interrupted_by_stop_signals; it
    # stayed for the whole build before, past a 90 s wait in one CI run).
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == [], f"left behind: {[p.pid for p in alive]}"

    # The stream ended with its terminal events: the error chunk, then [DONE].
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: ")).get("error")
    assert error is not None, f"the stream ended before the cutoff: {lines[-3:]}"
    assert error["code"] == "service_unavailable"
    # Stopped without a traceback or a JSON line.
    after = text[text.index("Press Ctrl-C to stop.") :]
    print(after[-2000:])
    assert "Traceback" not in after and "Exception in ASGI" not in after
    assert not [line for line in after.split("\n") if line.lstrip().startswith("{")]
    assert after.index("neuraxis: stopped") > after.index("neuraxis: stopping")
