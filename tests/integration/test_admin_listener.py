"""The admin listener split, on real processes: cortex in front of a sim
neuron serves /v1, /healthz and /readyz on its API port, /metrics and
/sd/neurons on its admin port (loopback unless told otherwise), in one
process and with two workers."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from harness.gateway import Sim, cortex, sim_neurons
from harness.ports import free_port
from harness.procs import Proc, admin_args
from harness.stacks import SimStack

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


def _chats_counted(admin_url: str, model: str) -> float:
    text = httpx.get(f"{admin_url}/metrics", timeout=10).text
    line = f'neuraxis_requests_total{{api="chat",model="{model}",outcome="success"}} '
    return sum(float(x.removeprefix(line)) for x in text.splitlines() if x.startswith(line))


def test_the_api_port_serves_the_api_and_the_admin_port_the_rest(sim_stack: SimStack) -> None:
    # The session's sim stack has the admin listener on a port of its own:
    # the split needs no cortex of its own (it started one, 8-12 s here).
    base, admin_url, model = sim_stack.base_url, sim_stack.admin_url, sim_stack.healthy_model
    before = _chats_counted(admin_url, model)
    chat = {**CHAT, "model": model}
    assert httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=30).status_code == 200
    assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
    _not_found(f"{base}/metrics")
    _not_found(f"{base}/sd/neurons")
    paths = httpx.get(f"{base}/openapi.json", timeout=10).json()["paths"]
    assert "/metrics" not in paths and "/sd/neurons" not in paths

    metrics = httpx.get(f"{admin_url}/metrics", timeout=10)
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    groups = httpx.get(f"{admin_url}/sd/neurons", timeout=10).json()
    [group] = [g for g in groups if g["labels"]["model"] == model]
    neuron = group["labels"]["replica"]
    assert group["labels"] == {"replica": neuron, "model": model, "generation": "cpu"}
    assert f'neuraxis_replica_up{{replica="{neuron}"}} 1.0' in metrics.text
    assert _chats_counted(admin_url, model) == before + 1
    # Nothing of the API on the admin port, not even its schema.
    for path in ("/v1/models", "/readyz", "/healthz", "/openapi.json"):
        _not_found(f"{admin_url}{path}")


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


def _served_by_both_workers(base: str, log: Path) -> int:
    """Chats, each on a new connection, 16 at a time until both workers have
    served some (at most 128: the kernel may hand a loaded machine's accepts
    to one worker for a while); how many were sent."""

    def one(_: int) -> int:
        with httpx.Client(base_url=base, timeout=60) as client:
            return client.post("/v1/chat/completions", json=CHAT).status_code

    sent, pids = 0, set[int]()
    while len(pids) < 2 and sent < 128:
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(one, range(16))) == [200] * 16
        sent += 16
        pids = {
            json.loads(line)["pid"]
            for line in log.read_text().splitlines()
            if line.startswith("{") and '"neuraxis.cortex.requests"' in line
        }
    assert len(pids) == 2, "both workers should have served requests"
    return sent


def _sums(text: str) -> tuple[float, float]:
    """Successful requests and first tokens counted in a /metrics text."""
    total = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("neuraxis_requests_total{") and 'outcome="success"' in line
    )
    ttft = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("neuraxis_time_to_first_token_seconds_count{")
    )
    return total, ttft


def test_with_two_workers_each_serves_the_admin_listener_and_the_metrics_add_up(
    neuron: str, logs_dir: Path
) -> None:
    admin, admin_url = admin_args()
    log = logs_dir / "admin-cortex-workers.log"
    proc, base = _cortex(neuron, log, "--workers", "2", *admin)
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

        # Whichever worker answers the scrape, it reports both workers' sums
        # (from tests/integration/test_observability.py, where this started
        # a 2-worker cortex of its own on the real engine).
        sent = _served_by_both_workers(base, log)
        for _ in range(6):
            text = httpx.get(f"{admin_url}/metrics", headers={"Connection": "close"}).text
            assert _sums(text) == (sent, sent)
            assert f'neuraxis_replica_up{{replica="{neuron}"}} 1.0' in text
    finally:
        proc.stop()


def test_a_taken_admin_port_fails_the_start(neuron: str, logs_dir: Path) -> None:
    admin, _ = admin_args()
    # Whatever listens there (another cortex did, before: a start of its own
    # for a port only), the start fails the same way.
    holder = socket.create_server(("127.0.0.1", int(admin[1])))
    log = logs_dir / "admin-cortex-second.log"
    second = Proc(["cortex", "--port", str(free_port()), "--neuron", neuron, *admin], log)
    try:
        assert second.popen.wait(timeout=60) == 1
        assert f"cannot listen on 127.0.0.1:{admin[1]} (admin listener)" in log.read_text()
    finally:
        second.stop()
        holder.close()
