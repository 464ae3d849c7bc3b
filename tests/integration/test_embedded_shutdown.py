"""The end of the session's `neuraxis up` (the shared stack, so these run
last: tests/conftest.py orders every `ends_stack` test after the others).
A SIGKILLed replica neuron leaves no vLLM EngineCore behind; when the chat
neuron's engine core dies the neuron answers UNAVAILABLE (and cortex 503);
and on Ctrl-C (SIGINT) `up` leaves no process behind, the engines' included.
"""

from __future__ import annotations

import os
import signal
import time

import grpc
import httpx
import psutil
import pytest

from axon.v1 import neuron_pb2 as pb
from harness.procs import neuron_stub
from harness.stacks import EMBEDDING_MODEL, MODEL, Stack

pytestmark = [pytest.mark.integration, pytest.mark.ends_stack]


def _neuron(up: psutil.Process, model: str) -> psutil.Process:
    """The replica's `neuron serve` for `model`: a replica's neuron gets its
    settings as NEURAXIS_NEURON_* variables."""
    return next(
        p
        for p in up.children(recursive=True)
        if "serve" in p.cmdline() and p.environ().get("NEURAXIS_NEURON_SERVED_ID") == model
    )


def _engine_cores(neuron: psutil.Process) -> list[psutil.Process]:
    # vLLM titles it VLLM::EngineCore; the kernel keeps 15 characters of
    # that as the process name, and the command line shows the title only
    # when setproctitle could rewrite it.
    return [
        p
        for p in neuron.children(recursive=True)
        if "EngineCore" in " ".join(p.cmdline()) or "EngineCor" in p.name()
    ]


def test_no_engine_core_outlives_a_sigkilled_neuron(stack: Stack) -> None:
    # The embedding model's replica: the chat model's serves the test after.
    neuron = _neuron(psutil.Process(stack.proc.popen.pid), EMBEDDING_MODEL)
    cores = _engine_cores(neuron)
    assert cores, "no EngineCore process found under the neuron"
    os.kill(neuron.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(cores, timeout=10)
    assert alive == [], "an EngineCore outlived its SIGKILLed neuron"


def test_a_dead_engine_is_unavailable_and_ctrl_c_stops_everything(stack: Stack) -> None:
    r = httpx.post(
        f"{stack.base_url}/v1/chat/completions",
        json={
            "model": MODEL,
            "temperature": 0,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
        },
        timeout=60,
    )
    assert "Paris" in r.json()["choices"][0]["message"]["content"]
    up = psutil.Process(stack.proc.popen.pid)
    tree = up.children(recursive=True)
    # Ray, cortex, the replicas' neurons and vLLM's engine cores at least.
    assert len(tree) >= 5
    names = " ".join(" ".join(p.cmdline()) for p in tree)
    assert "neuron" in names and "cortex" in names and "raylet" in names

    # Kill the engine core: the neuron must say UNAVAILABLE, not hang.
    cores = _engine_cores(_neuron(up, MODEL))
    assert cores, "no EngineCore process found under the chat neuron"
    cores[0].kill()
    request = pb.GenerateRequest(
        request_id="after-engine-death",
        model=MODEL,
        messages=[pb.ChatMessage(role="user", content="Hello")],
    )
    with grpc.insecure_channel(stack.neuron_address) as channel:
        stub = neuron_stub(channel)
        code = None
        for _ in range(50):
            try:
                list(stub.Generate(request, timeout=10))
            except grpc.RpcError as e:
                code = e.code()
                break
            time.sleep(0.2)
    assert code == grpc.StatusCode.UNAVAILABLE
    r = httpx.post(
        f"{stack.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "Hello"}]},
        timeout=60,
    )
    assert r.status_code == 503 and "retry-after" in r.headers

    # Whatever started meanwhile (the controller replacing both replicas)
    # must stop too.
    tree = up.children(recursive=True)
    stack.proc.popen.send_signal(signal.SIGINT)
    assert stack.proc.popen.wait(timeout=90) == 0
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert alive == [], f"left behind: {[p.pid for p in alive]}"
