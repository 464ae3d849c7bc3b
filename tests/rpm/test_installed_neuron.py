"""neuraxis-neuron.service's command and environment, run from the scratch
root in a mount namespace where the packages are at their installed paths
(conftest.as_installed): the CPU flavour refuses a host with GPUs of another
generation (NVML faked), takes a host without GPUs, and says so when the
head's Ray token or its TLS files have not been copied."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from harness.fake_nvml import fake_nvml_env
from harness.ports import free_port
from tests.rpm.conftest import as_installed, kill_processes_mentioning
from tests.rpm.installed import unit_command, unit_env

UNIT = "neuraxis-neuron.service"
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
    env = fake_nvml_env([(name, capability)] * 2, unit_env(scratch_root, UNIT))
    result = subprocess.run(
        as_installed(scratch_root, tmp_path, unit_command(scratch_root, UNIT)),
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


def _agent_env(scratch_root: Path, ray_tmp: str) -> dict[str, str]:
    """The unit's environment on a host without GPUs (NVML faked), told to
    join a Ray head where none listens, with Ray's files under `ray_tmp`."""
    env = fake_nvml_env([], unit_env(scratch_root, UNIT))
    env["NEURAXIS_NEURON_RAY_ADDRESS"] = f"127.0.0.1:{free_port()}"
    env["RAY_TMPDIR"] = ray_tmp
    return env


def test_the_cpu_neuron_accepts_a_host_without_gpus(
    scratch_root: Path, tmp_path: Path, ray_tmp: str
) -> None:
    """The control: the same command with NVML reporting no GPU passes the
    check and goes on to join Ray (here, a head that is not there)."""
    env = _agent_env(scratch_root, ray_tmp)
    proc = subprocess.Popen(
        as_installed(scratch_root, tmp_path, unit_command(scratch_root, UNIT)),
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
    # Its TLS files are there (copied, as docs/deploy.md says).
    etc = _neuron_host_etc(scratch_root, tmp_path, ["neuron.toml", *TLS_FILES])
    result = _run_agent(scratch_root, tmp_path, ray_tmp, etc)
    assert result.returncode != 0
    assert (
        "RAY_AUTH_TOKEN_PATH is set but file cannot be opened or is empty: "
        "/etc/neuraxis/ray-auth-token"
    ) in result.stderr, result.stderr[-2000:]


def test_a_neuron_host_without_the_tls_files_says_so(
    scratch_root: Path, tmp_path: Path, ray_tmp: str
) -> None:
    """The packaged neuron.toml turns mutual TLS on: a GPU host whose
    operator has copied the token but not the TLS files stops at once, with a
    configuration error (exit 2: systemd does not retry it) naming the file."""
    etc = _neuron_host_etc(scratch_root, tmp_path, ["neuron.toml", "ray-auth-token"])
    result = _run_agent(scratch_root, tmp_path, ray_tmp, etc)
    assert result.returncode == 2
    assert "tls_ca: cannot read /etc/neuraxis/tls/ca.crt" in result.stderr, result.stderr[-2000:]


TLS_FILES = ("tls/ca.crt", "tls/neuron.crt", "tls/neuron.key")


def _neuron_host_etc(scratch_root: Path, tmp_path: Path, names: list[str]) -> Path:
    """An /etc/neuraxis of a GPU host (no neuraxis-cortex there) with `names`
    copied from the head host's."""
    etc = tmp_path / "etc-neuraxis"
    for name in names:
        (etc / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(scratch_root / "etc/neuraxis" / name, etc / name)
    return etc


def _run_agent(
    scratch_root: Path, tmp_path: Path, ray_tmp: str, etc: Path
) -> subprocess.CompletedProcess[str]:
    env = _agent_env(scratch_root, ray_tmp)
    env["HOME"] = str(tmp_path)
    try:
        return subprocess.run(
            as_installed(scratch_root, tmp_path / "ns", unit_command(scratch_root, UNIT), etc),
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
    finally:
        kill_processes_mentioning(ray_tmp)
