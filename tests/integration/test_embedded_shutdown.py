"""`neuraxis up` answers through the whole stack; when vLLM's engine core dies
the neuron answers UNAVAILABLE (and cortex 503); and on Ctrl-C (SIGINT) it
leaves no process behind, the engine's processes included."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import grpc
import httpx
import psutil
import pytest

from axon.v1 import neuron_pb2 as pb
from harness.procs import neuron_addresses, neuron_stub, start_up, wait_http_ready
from harness.stacks import ENGINE_START_TIMEOUT_S, MODEL


@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_up_serves_then_stops_everything(logs_dir: Path, sig: int) -> None:
    up = start_up(logs_dir / "up2.log")
    proc, base = up.proc, up.base_url
    try:
        wait_http_ready(proc, f"{base}/readyz", ENGINE_START_TIMEOUT_S)
        neuron = neuron_addresses(up.admin_url)[MODEL]
        r = httpx.post(
            f"{base}/v1/chat/completions",
            json={
                "model": MODEL,
                "temperature": 0,
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
            },
            timeout=60,
        )
        assert "Paris" in r.json()["choices"][0]["message"]["content"]
        tree = psutil.Process(proc.popen.pid).children(recursive=True)
        # Ray, cortex, the replicas' neurons and vLLM's engine cores at least.
        assert len(tree) >= 5
        names = " ".join(" ".join(p.cmdline()) for p in tree)
        assert "neuron" in names and "cortex" in names and "raylet" in names

        # Kill the engine core: the neuron must say UNAVAILABLE, not hang.
        # A replica's neuron gets its settings as NEURAXIS_NEURON_* variables.
        chat_neuron = next(
            p
            for p in tree
            if "serve" in p.cmdline() and p.environ().get("NEURAXIS_NEURON_SERVED_ID") == MODEL
        )
        # vLLM titles it VLLM::EngineCore; the kernel keeps 15 characters of
        # that as the process name, and the command line shows the title only
        # when setproctitle could rewrite it.
        engine_core = [
            p
            for p in chat_neuron.children()
            if "EngineCore" in " ".join(p.cmdline()) or "EngineCor" in p.name()
        ]
        assert engine_core, [p.cmdline() for p in chat_neuron.children()]
        engine_core[0].kill()
        request = pb.GenerateRequest(
            request_id="after-engine-death",
            model=MODEL,
            messages=[pb.ChatMessage(role="user", content="Hello")],
        )
        with grpc.insecure_channel(neuron) as channel:
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
            f"{base}/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "Hello"}]},
            timeout=60,
        )
        assert r.status_code == 503 and "retry-after" in r.headers

        proc.popen.send_signal(sig)
        assert proc.popen.wait(timeout=90) == 0
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert alive == [], f"left behind: {[p.pid for p in alive]}"
    finally:
        proc.stop()
