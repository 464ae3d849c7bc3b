"""The head and cortex under their units' commands, environments and
MemoryDenyWriteExecute (systemd's seccomp filter, mdwe_exec.py), waited for
as Type=notify services, and stopped as the units stop them; the Ray token
between them and an operator's shell."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.notify import NotifySocket
from harness.ports import free_port
from tests.rpm.conftest import as_installed, kill_processes_mentioning, processes_mentioning
from tests.rpm.installed import unit_command, unit_env
from tests.rpm.test_units import unit_settings

HERE = Path(__file__).resolve().parent


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen[str], log: Path) -> bytes:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body: bytes = response.read()
                return body
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer in {timeout_s} s: {log.read_text()[-3000:]}")


@dataclass
class Service:
    proc: subprocess.Popen[str]
    log: Path
    notify: NotifySocket

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@dataclass
class Services:
    head: Service
    cortex: Service
    http_port: int
    ray_port: int
    ray_tmp: str


def _start_service(
    scratch_root: Path, tmp_path: Path, unit: str, name: str, settings: dict[str, str]
) -> Service:
    """The unit's command and environment (plus `settings`) under the unit's
    MemoryDenyWriteExecute (systemd's seccomp filter), with a notify socket
    of the test's own as NOTIFY_SOCKET."""
    notify = NotifySocket(tmp_path / f"{name}.notify")
    env = unit_env(scratch_root, unit) | settings | {"NOTIFY_SOCKET": str(notify.path)}
    command = ["/usr/bin/python3", str(HERE / "mdwe_exec.py"), *unit_command(scratch_root, unit)]
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            as_installed(scratch_root, tmp_path / f"ns-{name}", command),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp_path,
        )
    return Service(proc, log_path, notify)


@pytest.fixture
def services(scratch_root: Path, tmp_path: Path, ray_tmp: str) -> Iterator[Services]:
    """neuraxis-head.service and neuraxis-cortex.service as the units run them,
    with the packaged head.toml and cortex.toml (cluster mode, the packaged
    deployment spec), on loopback ports instead of the example's address.
    Each is waited for as systemd would under Type=notify: until READY=1."""
    http_port, ray_port = free_port(), free_port()
    started: list[Service] = []
    try:
        head = _start_service(
            scratch_root,
            tmp_path,
            "neuraxis-head.service",
            "head",
            {
                "NEURAXIS_HEAD_RAY_NODE_IP": "127.0.0.1",
                "NEURAXIS_HEAD_RAY_PORT": str(ray_port),
                "RAY_TMPDIR": ray_tmp,
            },
        )
        started.append(head)
        seconds = head.notify.wait_for("READY=1", head.alive, 120, head.log_tail)
        print(f"neuraxis-head: READY after {seconds:.1f} s")
        cortex = _start_service(
            scratch_root,
            tmp_path,
            "neuraxis-cortex.service",
            "cortex",
            {
                "NEURAXIS_CORTEX_HOST": "127.0.0.1",
                "NEURAXIS_CORTEX_PORT": str(http_port),
                "NEURAXIS_CORTEX_ADMIN_PORT": str(free_port()),
                "NEURAXIS_CORTEX_RAY_ADDRESS": f"127.0.0.1:{ray_port}",
                "RAY_TMPDIR": ray_tmp,
            },
        )
        started.append(cortex)
        # Ready with the controller's first table, though no replica can be
        # placed here (no GPU host): cortex must not wait for the models.
        seconds = cortex.notify.wait_for("READY=1", cortex.alive, 300, cortex.log_tail)
        print(f"neuraxis-cortex: READY after {seconds:.1f} s")
        yield Services(head, cortex, http_port, ray_port, ray_tmp)
    finally:
        for service in reversed(started):
            if service.alive():
                service.proc.kill()
            service.proc.wait()
            service.notify.close()
        kill_processes_mentioning(ray_tmp)


def test_the_filter_refuses_writable_executable_memory(tmp_path: Path) -> None:
    code = "import mmap; mmap.mmap(-1, 4096, prot=mmap.PROT_WRITE | mmap.PROT_EXEC)"
    result = subprocess.run(
        ["/usr/bin/python3", str(HERE / "mdwe_exec.py"), "/usr/bin/python3", "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode != 0 and "Operation not permitted" in result.stderr


def test_the_head_and_cortex_run_as_their_units_say(
    scratch_root: Path, services: Services, tmp_path: Path
) -> None:
    c = services
    body = wait_http(f"http://127.0.0.1:{c.http_port}/healthz", 120, c.cortex.proc, c.cortex.log)
    assert json.loads(body) == {"status": "ok"}

    # The controller on the token-authenticated head answers `neuraxis status`
    # from an operator's shell: /usr/bin/neuraxis finds the token itself...
    address = f"127.0.0.1:{c.ray_port}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NEURAXIS_", "RAY_"))}
    clean["HOME"] = str(tmp_path)  # no ~/.ray/auth_token there
    status = [str(scratch_root / "usr/bin/neuraxis"), "status", "--json", "--address", address]
    deadline = time.monotonic() + 60
    while True:
        result = subprocess.run(status, capture_output=True, text=True, env=clean, cwd=tmp_path)
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert result.returncode == 0, result.stderr[-2000:]
    models = {m["id"] for m in json.loads(result.stdout)["models"]}
    assert models == {"smollm2-135m-instruct", "all-minilm-l6-v2"}

    # ...and the head turns away a client without it.
    python = scratch_root / "opt/neuraxis/cortex/bin/python"
    refused = subprocess.run(
        [str(python), "-P", "-m", "neuraxis.cli", "status", "--json", "--address", address],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
        timeout=120,
    )
    assert refused.returncode != 0
    assert re.search(r"(?i)authenticat|token", refused.stderr), refused.stderr[-2000:]

    # SIGTERM (KillSignal, to the main process only: KillMode=mixed) stops
    # cortex within the unit's TimeoutStopSec, and only cortex: the head, and
    # so the cluster, stays.
    stop_s = int(unit_settings(scratch_root, "neuraxis-cortex.service")["TimeoutStopSec"][0])
    c.cortex.proc.send_signal(signal.SIGTERM)
    c.cortex.proc.wait(timeout=stop_s)
    # uvicorn re-raises the SIGTERM once it has shut down; systemd counts death
    # by SIGTERM as a clean stop.
    assert c.cortex.proc.returncode in (0, -signal.SIGTERM), c.cortex.log_tail()
    c.cortex.notify.wait_for("STOPPING=1", lambda: True, 5, c.cortex.log_tail)
    assert c.head.alive(), c.head.log_tail()
    result = subprocess.run(status, capture_output=True, text=True, env=clean, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]

    # The head's SIGTERM stops it and every Ray process it started.
    stop_s = int(unit_settings(scratch_root, "neuraxis-head.service")["TimeoutStopSec"][0])
    started = time.monotonic()
    c.head.proc.send_signal(signal.SIGTERM)
    c.head.proc.wait(timeout=stop_s)
    assert c.head.proc.returncode == 0, c.head.log_tail()
    while processes_mentioning(c.ray_tmp) and time.monotonic() - started < stop_s:
        time.sleep(0.5)
    print(f"the head and its Ray processes stopped in {time.monotonic() - started:.1f} s")
    assert processes_mentioning(c.ray_tmp) == []
