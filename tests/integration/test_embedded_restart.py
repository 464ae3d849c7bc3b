"""`neuraxis up` supervises its cortex as systemd supervises the packaged one:
cortex killed with SIGKILL is started again on the same ports, follows the
same controller, and serves within seconds; the replicas' neurons keep
running (the same processes: no engine reloads).

On the session's `stack`: cortex comes back on the same ports, and the test
waits until it is ready again, so the tests after it find the stack as it was.
"""

from __future__ import annotations

import time

import httpx
import psutil
import pytest

from harness.procs import neuron_addresses
from harness.stacks import MODEL, Stack

pytestmark = pytest.mark.integration

# cortex's start (imports, joining Ray, the controller's table, the first
# Info polls) takes a few seconds; this bound leaves room for a busy machine.
BACK_WITHIN_S = 60.0


def _cortex(up: psutil.Process) -> psutil.Process:
    (cortex,) = [p for p in up.children() if "cortex" in p.cmdline()]
    return cortex


def _neurons(up: psutil.Process) -> set[int]:
    """The replicas' neurons (`neuron serve`, started by the replica actors)."""
    tree = up.children(recursive=True)
    return {p.pid for p in tree if "neuron" in p.cmdline() and "serve" in p.cmdline()}


def _chat(base_url: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=30)


def test_a_killed_cortex_is_started_again_and_the_replicas_keep_running(stack: Stack) -> None:
    up = psutil.Process(stack.proc.popen.pid)
    cortex = _cortex(up)
    neurons = _neurons(up)
    assert len(neurons) == 2, [p.cmdline() for p in up.children(recursive=True)]
    addresses = neuron_addresses(stack.admin_url)

    cortex.kill()
    cortex.wait(timeout=10)
    killed = time.monotonic()
    while True:
        assert stack.proc.alive(), stack.proc.log_tail()
        assert time.monotonic() - killed < BACK_WITHIN_S, stack.proc.log_tail()
        try:
            if _chat(stack.base_url).status_code == 200:
                break
        except httpx.TransportError:
            pass  # nothing listens on the port yet
        time.sleep(0.2)
    print(f"served again {time.monotonic() - killed:.1f} s after cortex was killed")

    assert _cortex(up).pid != cortex.pid
    # The same neuron processes at the same addresses: nothing was reloaded.
    assert _neurons(up) == neurons
    assert neuron_addresses(stack.admin_url) == addresses
    assert httpx.get(f"{stack.base_url}/readyz", timeout=10).status_code == 200
