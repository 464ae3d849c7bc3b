"""The head as a service of its own (`neuraxis head`), cortex joining it as a
client, and both telling systemd when they are ready (sd_notify), with real
processes: a head, a labelled Ray worker node with simulated replicas, and
cortex in cluster mode.

Each service runs with a NOTIFY_SOCKET of the test's own, as systemd would
give it under `Type=notify`; the test reads READY=1 from it. Then cortex is
SIGKILLed and started again (with two workers, whose notifications the
main process passes on): the replicas, detached and owned by the head's
cluster, keep running (same replica, same neuron process: nothing reloads),
and the new cortex serves again once it has the controller's table.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from axon.process import stop_process_group
from harness.notify import NotifySocket
from harness.ports import free_port
from harness.procs import Proc, child_env, start_gpu_node
from harness.sim_specs import sim_replicas_spec

MODEL = "sim-head-service"
SPEC = sim_replicas_spec(MODEL, 1)

pytestmark = pytest.mark.integration


def _status(ray_address: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", "status", "--json", "--address", ray_address],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    data: dict[str, object] = json.loads(out.stdout)
    return data


def _replicas(ray_address: str) -> list[dict[str, object]]:
    models = _status(ray_address)["models"]
    assert isinstance(models, list)
    model = next(m for m in models if m["id"] == MODEL)
    return [r for r in model["replicas"] if r["state"] == "ready"]


def _chat(base_url: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=30)


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`neuraxis head` under a notify socket, and a GPU node joined to it."""
    work = tmp_path_factory.mktemp("head-service")
    port = free_port()
    address = f"127.0.0.1:{port}"
    notify = NotifySocket(work / "head.notify")
    head = Proc(
        ["head", "--ray-port", str(port), "--log-format", "text"],
        work / "head.log",
        {"NOTIFY_SOCKET": str(notify.path)},
    )
    node: subprocess.Popen[bytes] | None = None
    try:
        seconds = notify.wait_for("READY=1", head.alive, 90, head.log_tail)
        print(f"head READY after {seconds:.1f} s")
        node = start_gpu_node(address, work / "node.log")
        yield address, work
    finally:
        notify.close()
        if node is not None:
            stop_process_group(node, timeout_s=30)
        head.stop()
        # `neuraxis head` stops the head's whole process group on SIGTERM.
        assert not head.alive()


def _start_cortex(
    address: str, work: Path, port: int, name: str, workers: int = 1
) -> tuple[Proc, NotifySocket]:
    spec = work / "deployment.toml"
    spec.write_text(SPEC)
    notify = NotifySocket(work / f"{name}.notify")
    cortex = Proc(
        [
            "cortex",
            "--port",
            str(port),
            "--plaintext",
            "--ray-address",
            address,
            "--deployment",
            str(spec),
            "--state-dir",
            str(work / "state"),
            "--health-interval-s",
            "0.5",
            "--workers",
            str(workers),
        ],
        work / f"{name}.log",
        {"NOTIFY_SOCKET": str(notify.path)},
    )
    return cortex, notify


def test_cortex_is_ready_with_a_table_and_a_restart_reloads_no_replica(
    head: tuple[str, Path],
) -> None:
    address, work = head
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    cortex, notify = _start_cortex(address, work, port, "cortex-1")
    try:
        seconds = notify.wait_for("READY=1", cortex.alive, 120, cortex.log_tail)
        print(f"cortex READY after {seconds:.1f} s")
        # Served once the controller placed the replica and published it;
        # `neuraxis status` (a Ray client each call, seconds) is asked after.
        deadline = time.monotonic() + 150
        while _chat(base_url).status_code != 200:
            assert time.monotonic() < deadline, cortex.log_tail()
            time.sleep(0.2)
        [before] = _replicas(address)
        # A crash: no drain, no goodbye to the controller.
        cortex.stop(signal.SIGKILL)
        notify.close()
        [still] = _replicas(address)
        assert (still["id"], still["pid"]) == (before["id"], before["pid"])

        restarted = time.monotonic()
        # Started again with two workers: their READY reaches the notify
        # socket through the main process (cortex/notify_relay.py).
        cortex, notify = _start_cortex(address, work, port, "cortex-2", workers=2)
        notify.wait_for("READY=1", cortex.alive, 120, cortex.log_tail)
        while _chat(base_url).status_code != 200:
            assert time.monotonic() - restarted < 120, cortex.log_tail()
            time.sleep(0.1)
        print(f"cortex serving again {time.monotonic() - restarted:.1f} s after its restart")
        [after] = _replicas(address)
        # The same replica and neuron process: nothing was reloaded.
        assert (after["id"], after["pid"]) == (before["id"], before["pid"])
    finally:
        notify.close()
        cortex.stop()
