"""`neuraxis up` answers through the whole stack and, on Ctrl-C (SIGINT) or
SIGTERM, leaves no process behind — vLLM's engine core included."""

from __future__ import annotations

import signal

import httpx
import psutil
import pytest

from tests.integration.conftest import ENGINE_START_TIMEOUT_S, MODEL
from tests.procs import Proc, free_port, wait_http_ready


@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_up_serves_then_stops_everything(logs_dir, sig: int) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    proc = Proc(
        ["up", "--port", str(port), "--neuron-port", str(free_port())], logs_dir / "up2.log"
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http_ready(proc, f"{base}/readyz", ENGINE_START_TIMEOUT_S)
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
        # The supervisor, the neuron, cortex and vLLM's engine core at least.
        assert len(tree) >= 3
        names = " ".join(" ".join(p.cmdline()) for p in tree)
        assert "neuron" in names and "cortex" in names
        proc.popen.send_signal(sig)
        assert proc.popen.wait(timeout=90) == 0
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert alive == [], f"left behind: {[p.pid for p in alive]}"
    finally:
        proc.stop()
