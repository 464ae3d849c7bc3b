"""The packages installed into a scratch root (`rpm -i --root DIR --nodeps`),
run from there with the host's /usr/bin/python3.11, as the units would run
them: the command, the config check, the neuron's refusal of another GPU
generation (NVML faked), the engine imports, and the head and cortex
under the cortex unit's MemoryDenyWriteExecute and Ray token settings. The
units' commands run in a mount namespace where the packages are at their
installed paths (conftest.as_installed), so that they run verbatim."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.fake_nvml import fake_nvml_env
from harness.notify import NotifySocket
from harness.ports import free_port
from tests.rpm.conftest import VERSION, Packages, as_installed
from tests.rpm.test_units import unit_settings

HERE = Path(__file__).resolve().parent


def unit_command(root: Path, unit: str) -> list[str]:
    (command,) = unit_settings(root, unit)["ExecStart"]
    return shlex.split(command)


def unit_env(root: Path, unit: str) -> dict[str, str]:
    """This process's environment (PATH and the like) without any neuraxis or
    Ray settings of its own, plus the unit's Environment= settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURAXIS_", "RAY_"))}
    for assignment in shlex.split(" ".join(unit_settings(root, unit)["Environment"])):
        key, _, value = assignment.partition("=")
        env[key] = value
    return env


def neuraxis(root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed /usr/bin/neuraxis, run from the scratch root."""
    return subprocess.run(
        [str(root / "usr/bin/neuraxis"), *args], capture_output=True, text=True, cwd=cwd
    )


def test_the_installed_command_runs(scratch_root: Path, tmp_path: Path) -> None:
    result = neuraxis(scratch_root, "--version", cwd=tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, f"neuraxis {VERSION}")


def test_the_installed_configs_check(scratch_root: Path, tmp_path: Path) -> None:
    etc = scratch_root / "etc/neuraxis"
    result = neuraxis(
        scratch_root,
        "config",
        "check",
        "--cortex",
        str(etc / "cortex.toml"),
        "--neuron",
        str(etc / "neuron.toml"),
        "--deployment",
        str(etc / "deployment.toml"),
        "--head",
        str(etc / "head.toml"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        str(etc / name) for name in ("cortex.toml", "neuron.toml", "deployment.toml", "head.toml")
    ]
    assert all(": ok" in line for line in lines), lines
    # The cpu flavour's neuron.toml names its generation.
    assert 'generation = "cpu"' in (etc / "neuron.toml").read_text().splitlines()


def test_a_broken_installed_config_is_named(scratch_root: Path, tmp_path: Path) -> None:
    broken = tmp_path / "neuron.toml"
    text = (scratch_root / "etc/neuraxis/neuron.toml").read_text()
    broken.write_text(text.replace('generation = "cpu"', 'generation = "volta"'))
    result = neuraxis(scratch_root, "config", "check", "--neuron", str(broken), cwd=tmp_path)
    assert result.returncode != 0
    assert str(broken) in result.stderr and "generation" in result.stderr, result.stderr


def test_the_environments_are_relocated_and_precompiled(scratch_root: Path) -> None:
    for env in ("cortex", "neuron"):
        base = scratch_root / "opt/neuraxis" / env
        cfg = (base / "pyvenv.cfg").read_text()
        assert "home = /usr/bin\n" in cfg and str(scratch_root) not in cfg
        for script in ("neuraxis", "ray"):
            shebang, *_ = (base / "bin" / script).read_text().splitlines()
            assert shebang == f"#!/opt/neuraxis/{env}/bin/python"
        assert "from neuraxis.cli import main" in (base / "bin/neuraxis").read_text()
        pyc = base / "lib/python3.11/site-packages/neuraxis/__pycache__/cli.cpython-311.pyc"
        data = pyc.read_bytes()
        # flags 0b01: hash-based, not checked against the source (PEP 552).
        assert int.from_bytes(data[4:8], "little") == 0b01
        assert f"/opt/neuraxis/{env}/lib".encode() in data and b"BUILDROOT" not in data


def test_the_engine_imports_from_the_installed_environment(
    scratch_root: Path, tmp_path: Path
) -> None:
    code = (
        "import sys, json, vllm, torch, neuraxis, neuron.engine.vllm.engine\n"
        "try:\n    import torchvision\n    tv = True\nexcept ImportError:\n    tv = False\n"
        "print(json.dumps({'prefix': sys.prefix, 'vllm': vllm.__file__,"
        " 'neuraxis': neuraxis.__file__, 'torch': torch.__version__, 'torchvision': tv}))"
    )
    cmd = as_installed(scratch_root, tmp_path, ["/opt/neuraxis/neuron/bin/python", "-c", code])
    result = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["prefix"] == "/opt/neuraxis/neuron"
    assert found["vllm"].startswith("/opt/neuraxis/neuron/lib/python3.11/site-packages/")
    assert found["neuraxis"].startswith("/opt/neuraxis/neuron/lib/python3.11/site-packages/")
    assert found["torch"] == "2.13.0+cpu"
    assert found["torchvision"] is False


GPUS = [
    ("NVIDIA A100-SXM4-80GB", (8, 0), "ampere"),
    ("NVIDIA L40S", (8, 9), "ada"),
    ("NVIDIA H100 80GB HBM3", (9, 0), "hopper"),
    ("NVIDIA B200", (10, 0), "blackwell"),
]


@pytest.mark.parametrize(("name", "capability", "generation"), GPUS)
def test_the_cpu_neuron_refuses_a_gpu_host(
    scratch_root: Path, tmp_path: Path, name: str, capability: tuple[int, int], generation: str
) -> None:
    """neuraxis-neuron.service's command and environment, on a host whose NVML
    reports GPUs of another generation than the flavour's: it stops at once,
    naming both and the flavour to install."""
    unit = "neuraxis-neuron.service"
    env = fake_nvml_env([(name, capability)] * 2, unit_env(scratch_root, unit))
    result = subprocess.run(
        as_installed(scratch_root, tmp_path, unit_command(scratch_root, unit)),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 78  # EX_CONFIG: systemd does not retry it
    assert (
        f"this neuron is installed for cpu GPUs, but the host has {generation}; "
        f"install the neuraxis-neuron-{generation} flavour"
    ) in result.stderr


@pytest.fixture
def ray_tmp() -> Iterator[str]:
    """RAY_TMPDIR for a test: short (Ray's socket paths), removed after it."""
    path = tempfile.mkdtemp(prefix="nx-ray-")
    yield path
    kill_processes_mentioning(path)
    shutil.rmtree(path, ignore_errors=True)


def test_the_cpu_neuron_accepts_a_host_without_gpus(
    scratch_root: Path, tmp_path: Path, ray_tmp: str
) -> None:
    """The control: the same command with NVML reporting no GPU passes the
    check and goes on to join Ray (here, a head that is not there)."""
    unit = "neuraxis-neuron.service"
    env = fake_nvml_env([], unit_env(scratch_root, unit))
    env["NEURAXIS_NEURON_RAY_ADDRESS"] = f"127.0.0.1:{free_port()}"
    env["RAY_TMPDIR"] = ray_tmp
    proc = subprocess.Popen(
        as_installed(scratch_root, tmp_path, unit_command(scratch_root, unit)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "joining the Ray cluster at" in line and "as a cpu node (0 GPUs" in line, line
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        kill_processes_mentioning(ray_tmp)


def test_a_neuron_host_without_the_token_says_so(
    scratch_root: Path, tmp_path: Path, ray_tmp: str
) -> None:
    """A GPU host (no neuraxis-cortex: no token made there) whose operator
    has not copied the head's token yet: the agent stops, naming the file."""
    etc = tmp_path / "etc-neuraxis"
    etc.mkdir()
    shutil.copy(scratch_root / "etc/neuraxis/neuron.toml", etc)
    unit = "neuraxis-neuron.service"
    env = fake_nvml_env([], unit_env(scratch_root, unit))
    env["NEURAXIS_NEURON_RAY_ADDRESS"] = f"127.0.0.1:{free_port()}"
    env["RAY_TMPDIR"] = ray_tmp
    env["HOME"] = str(tmp_path)
    try:
        result = subprocess.run(
            as_installed(scratch_root, tmp_path / "ns", unit_command(scratch_root, unit), etc),
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
    finally:
        kill_processes_mentioning(ray_tmp)
    assert result.returncode != 0
    assert (
        "RAY_AUTH_TOKEN_PATH is set but file cannot be opened or is empty: "
        "/etc/neuraxis/ray-auth-token"
    ) in result.stderr, result.stderr[-2000:]


def test_the_ray_token_is_made_at_install(scratch_root: Path) -> None:
    token = scratch_root / "etc/neuraxis/ray-auth-token"
    assert re.fullmatch(r"[0-9a-f]{64}", token.read_text())
    assert token.stat().st_mode & 0o777 == 0o640


def processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def kill_processes_mentioning(text: str) -> None:
    for pid in processes_mentioning(text):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


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


def test_the_ray_token_outlives_removing_and_reinstalling_cortex(
    packages: Packages, tmp_path: Path
) -> None:
    """Removing neuraxis-cortex leaves the token (no package owns it), and a
    reinstall keeps it: the copies on the neuron hosts stay valid."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "urandom").write_bytes(os.urandom(64))
    token = root / "etc/neuraxis/ray-auth-token"

    def rpm(*args: str) -> None:
        result = subprocess.run(
            ["rpm", "--root", str(root), "--nodeps", *args], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr

    rpm("-i", str(packages.common), str(packages.cortex))
    made = token.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", made)
    rpm("-e", "neuraxis-cortex")
    assert not (root / "usr/lib/systemd/system/neuraxis-cortex.service").exists()
    assert token.read_text() == made
    (root / "dev" / "urandom").write_bytes(os.urandom(64))  # a reinstall would draw anew
    rpm("-i", str(packages.cortex))
    assert token.read_text() == made
