"""The admin listener split, on real processes: cortex in front of a sim
neuron serves /v1, /healthz and /readyz on its API port, /metrics and
/sd/neurons on its admin port (loopback unless told otherwise), in one
process and with two workers."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from harness.gateway import Sim, cortex, sim_neurons
from harness.ports import free_port
from harness.procs import Proc, admin_args

MODEL = "sim-admin"
CHAT = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture(scope="module")
def neuron(logs_dir: Path) -> Iterator[str]:
    with sim_neurons(logs_dir, "admin", [Sim(MODEL)]) as (running,):
        yield running.address


def _cortex(neuron: str, log: Path, *extra: str) -> tuple[Proc, str]:
    args = ["--model", MODEL, "--state-dir", str(log.with_suffix(".state")), *extra]
    started = cortex(log, [neuron], *args)
    started.wait_ready()
    return started.proc, started.base_url


def _not_found(url: str) -> None:
    response = httpx.get(url, timeout=10)
    assert response.status_code == 404, (url, response.text)
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"] == f"Unknown path {httpx.URL(url).path}"
    assert set(error) == {"message", "type", "param", "code"}


def _admin_routes_serve(admin_url: str, neuron: str) -> None:
    metrics = httpx.get(f"{admin_url}/metrics", timeout=10)
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert f'neuraxis_replica_up{{replica="{neuron}"}} 1.0' in metrics.text
    [group] = httpx.get(f"{admin_url}/sd/neurons", timeout=10).json()
    assert group["labels"] == {"replica": neuron, "model": MODEL, "generation": "cpu"}


def _listening(pid: int) -> set[tuple[str, int]]:
    """The TCP addresses the process (and its workers) listen on."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return {
        (c.laddr.ip, c.laddr.port)
        for p in procs
        for c in p.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def test_the_api_port_serves_the_api_and_the_admin_port_the_rest(
    neuron: str, logs_dir: Path
) -> None:
    admin, admin_url = admin_args()
    proc, base = _cortex(neuron, logs_dir / "admin-cortex.log", *admin)
    try:
        assert httpx.post(f"{base}/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
        assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
        _not_found(f"{base}/metrics")
        _not_found(f"{base}/sd/neurons")
        paths = httpx.get(f"{base}/openapi.json", timeout=10).json()["paths"]
        assert "/metrics" not in paths and "/sd/neurons" not in paths

        _admin_routes_serve(admin_url, neuron)
        assert 'neuraxis_requests_total{api="chat",model="sim-admin",outcome="success"} 1.0' in (
            httpx.get(f"{admin_url}/metrics", timeout=10).text
        )
        # Nothing of the API on the admin port, not even its schema.
        for path in ("/v1/models", "/readyz", "/healthz", "/openapi.json"):
            _not_found(f"{admin_url}{path}")
    finally:
        proc.stop()


def test_the_admin_listener_binds_loopback_by_default_and_0_picks_a_port(
    neuron: str, logs_dir: Path
) -> None:
    """The API on every address (allowed, as behind a proxy), the admin
    listener still on 127.0.0.1 only; port 0 is a free port, logged."""
    log = logs_dir / "admin-cortex-public.log"
    extra = ["--host", "0.0.0.0", "--allow-unauthenticated", "--admin-port", "0"]
    proc, base = _cortex(neuron, log, *extra)
    try:
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        said = next(line["msg"] for line in lines if line["msg"].startswith("admin listener"))
        match = re.fullmatch(r"admin listener on http://127\.0\.0\.1:(\d+) \(.*\)", said)
        assert match, said
        admin_port, api_port = int(match[1]), int(base.rsplit(":", 1)[1])
        assert _listening(proc.popen.pid) == {("0.0.0.0", api_port), ("127.0.0.1", admin_port)}
        _admin_routes_serve(f"http://127.0.0.1:{admin_port}", neuron)
    finally:
        proc.stop()


def test_with_two_workers_each_serves_the_admin_listener(neuron: str, logs_dir: Path) -> None:
    admin, admin_url = admin_args()
    proc, base = _cortex(neuron, logs_dir / "admin-cortex-workers.log", "--workers", "2", *admin)
    try:
        # Each new connection may go to either worker: every answer is the same.
        for _ in range(6):
            _admin_routes_serve(admin_url, neuron)
            _not_found(f"{base}/metrics")
        # Both workers (multiprocessing's spawned children; not its resource
        # tracker) accept on the admin socket the supervisor bound.
        workers = [
            child
            for child in psutil.Process(proc.popen.pid).children()
            if child.cmdline()[-1:] == ["--multiprocessing-fork"]
        ]
        assert len(workers) == 2
        admin_port = int(admin_url.rsplit(":", 1)[1])
        for worker in workers:
            assert ("127.0.0.1", admin_port) in _listening(worker.pid)
    finally:
        proc.stop()


def test_a_taken_admin_port_fails_the_start(neuron: str, logs_dir: Path) -> None:
    admin, _ = admin_args()
    holder, _ = _cortex(neuron, logs_dir / "admin-cortex-holder.log", *admin)
    log = logs_dir / "admin-cortex-second.log"
    second = Proc(["cortex", "--port", str(free_port()), "--neuron", neuron, *admin], log)
    try:
        deadline = time.monotonic() + 60
        while second.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert second.popen.returncode == 1
        assert f"cannot listen on 127.0.0.1:{admin[1]} (admin listener)" in log.read_text()
    finally:
        second.stop()
        holder.stop()
