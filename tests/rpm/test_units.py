"""The installed systemd units: systemd-analyze verify and security on the
scratch root, the settings the services depend on, and the scriptlets' users
matching the shipped sysusers.d files."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from harness.units import unit_file_settings
from tests.rpm.conftest import ROOT, Packages, rpm_query

UNITS = ("neuraxis-cortex.service", "neuraxis-head.service", "neuraxis-neuron.service")
# The exposure score systemd-analyze gives each unit (0 best, 10 worst; an
# unhardened service scores ~9.6). Measured: cortex 1.4, head 1.4, neuron 1.8.
MAX_EXPOSURE = {
    "neuraxis-cortex.service": 1.5,
    "neuraxis-head.service": 1.5,
    "neuraxis-neuron.service": 2.0,
}


@pytest.fixture(scope="module")
def unit_root(scratch_root: Path) -> Path:
    """The scratch root, with the host's own units beside ours (verify follows
    our units' dependencies: multi-user.target, network-online.target, ...)."""
    units = scratch_root / "usr/lib/systemd/system"
    for unit in Path("/usr/lib/systemd/system").iterdir():
        target = units / unit.name
        if not target.exists() and not target.is_symlink():
            if unit.is_dir():
                shutil.copytree(unit, target, symlinks=True)
            else:
                shutil.copy(unit, target, follow_symlinks=False)
    return scratch_root


def unit_settings(root: Path, unit: str) -> dict[str, list[str]]:
    return unit_file_settings(root / "usr/lib/systemd/system" / unit)


@pytest.mark.parametrize("unit", UNITS)
def test_systemd_analyze_verify_passes(unit_root: Path, unit: str) -> None:
    result = subprocess.run(
        ["systemd-analyze", "verify", f"--root={unit_root}", unit],
        capture_output=True,
        text=True,
    )
    # verify warns about unknown keys or bad values and still exits 0: any
    # word from it is a failure.
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@pytest.mark.parametrize("unit", UNITS)
def test_exposure_score(unit_root: Path, unit: str) -> None:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", f"--root={unit_root}", unit],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout[-500:]
    score = float(match.group(1))
    print(f"{unit}: exposure {score}")
    assert score <= MAX_EXPOSURE[unit]


@pytest.mark.parametrize(
    ("unit", "exec_start"),
    [
        (
            "neuraxis-cortex.service",
            "/opt/neuraxis/cortex/bin/neuraxis cortex --config /etc/neuraxis/cortex.toml",
        ),
        (
            "neuraxis-head.service",
            "/opt/neuraxis/cortex/bin/neuraxis head --config /etc/neuraxis/head.toml",
        ),
        (
            "neuraxis-neuron.service",
            "/opt/neuraxis/neuron/bin/neuraxis neuron agent --config /etc/neuraxis/neuron.toml",
        ),
    ],
)
def test_the_service_settings(scratch_root: Path, unit: str, exec_start: str) -> None:
    s = unit_settings(scratch_root, unit)
    assert s["ExecStart"] == [exec_start]
    # cortex and the head apart from the neurons' user (test_least_privilege).
    assert s["User"] == ["neuraxis" if unit == "neuraxis-neuron.service" else "neuraxis-cortex"]
    # Restart for ever, without a start rate limit: a database or a head that
    # is down at boot comes back some time.
    assert s["Restart"] == ["always"]
    assert s["StartLimitIntervalSec"] == ["0"] and "StartLimitBurst" not in s
    assert int(s["LimitNOFILE"][0]) >= 65536
    if unit != "neuraxis-neuron.service":
        # READY=1 when the service can do its job (a test sees it: test_installed_services).
        assert s["Type"] == ["notify"]
    assert int(s["TasksMax"][0]) >= 1024 and s["MemoryMax"] and s["MemoryHigh"]
    if unit == "neuraxis-cortex.service":
        # uvicorn's workers notify through the main process (notify_relay.py).
        assert s["NotifyAccess"] == ["main"]
        assert s["WatchdogSec"] == ["60s"]
    # SIGTERM starts the drain; only the main process gets it, and it stops its
    # children (Ray, the engines) itself.
    assert s["KillSignal"] == ["SIGTERM"]
    assert s["KillMode"] == ["mixed"]
    stop_s = int(s["TimeoutStopSec"][0])
    if unit == "neuraxis-neuron.service":
        neuron = tomllib.loads((scratch_root / "etc/neuraxis/neuron.toml").read_text())
        assert stop_s >= float(neuron.get("drain_timeout_s", 30.0)) + 60
        assert int(s["TimeoutStartSec"][0]) >= 600  # a large model's load
    else:
        assert stop_s >= 60
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "CapabilityBoundingSet": "",
    }.items():
        assert s[key] == [value], key
    writable = " ".join(s["ReadWritePaths"]).split()
    if unit == "neuraxis-neuron.service":
        assert {"/var/lib/neuraxis", "/var/cache/neuraxis", "/run/neuraxis"} <= set(writable)
    else:
        assert writable == ["/var/lib/neuraxis-cortex", "/var/cache/neuraxis-cortex"]
    environment = " ".join(s["Environment"])
    assert "RAY_AUTH_MODE=token" in environment
    assert "RAY_AUTH_TOKEN_PATH=/etc/neuraxis/ray-auth-token" in environment


def test_least_privilege(scratch_root: Path) -> None:
    """cortex and the Ray head run as neuraxis-cortex, the neurons as
    neuraxis: each writes only its own directories, and /etc/neuraxis is
    read through the neuraxis group (test_installed_tls: what each reads)."""
    cortex, head, neuron = (unit_settings(scratch_root, unit) for unit in UNITS)
    for s in (cortex, head):
        assert (s["User"], s["Group"]) == (["neuraxis-cortex"], ["neuraxis-cortex"])
        assert s["SupplementaryGroups"] == ["neuraxis"]
        assert "HOME=/var/lib/neuraxis-cortex" in " ".join(s["Environment"])
    assert neuron["User"] == ["neuraxis"]
    # Ray's driver in cortex reaches the head's raylet by its sockets in the
    # head's /tmp: the same private /tmp.
    assert cortex["JoinsNamespaceOf"] == ["neuraxis-head.service"]
    assert cortex["PrivateTmp"] == head["PrivateTmp"] == ["yes"]


def test_the_neurons_limits_leave_a_large_model_room(scratch_root: Path) -> None:
    s = unit_settings(scratch_root, "neuraxis-neuron.service")
    # Percentages of the host's RAM: weights through the page cache, pinned
    # buffers and vLLM's CPU swap space need most of a GPU host's memory.
    high, top = (int(s[key][0].removesuffix("%")) for key in ("MemoryHigh", "MemoryMax"))
    assert 80 <= high < top <= 95
    assert int(s["TasksMax"][0]) >= 8192


def test_the_neuron_reaches_the_gpus_and_nothing_else(scratch_root: Path) -> None:
    s = unit_settings(scratch_root, "neuraxis-neuron.service")
    assert s["DevicePolicy"] == ["closed"]
    assert s["PrivateDevices"] == ["no"]  # it would hide /dev/nvidia*
    allowed = {d.split()[0] for d in s["DeviceAllow"]}
    assert allowed == {
        "char-nvidiactl",
        "char-nvidia-frontend",
        "char-nvidia-uvm",
        "char-nvidia-caps",
    }
    # PyTorch's oneDNN JIT needs writable executable memory.
    assert "MemoryDenyWriteExecute" not in s
    assert "NEURAXIS_CACHE_DIR=/var/lib/neuraxis/models" in " ".join(s["Environment"])


@pytest.mark.parametrize("unit", ["neuraxis-cortex.service", "neuraxis-head.service"])
def test_cortex_and_the_head_deny_writable_executable_memory(scratch_root: Path, unit: str) -> None:
    # test_installed_services runs cortex and the Ray head under the same filter.
    s = unit_settings(scratch_root, unit)
    assert s["MemoryDenyWriteExecute"] == ["yes"]
    assert s["PrivateDevices"] == ["yes"]


def sysusers_lines(name: str) -> list[str]:
    text = (ROOT / "deploy" / "sysusers.d" / name).read_text()
    return [" ".join(line.split()) for line in text.splitlines() if line and line[0] != "#"]


def pre_install_users(package: Path) -> list[str]:
    """The sysusers lines the %pre scriptlet passes to systemd-sysusers --inline."""
    script = "\n".join(rpm_query(package, "--scripts"))
    pre = script.split("preinstall scriptlet", 1)[1].split("scriptlet (using", 1)[0]
    call = re.search(r'run\("/usr/bin/systemd-sysusers", "--inline", (.*)\)', pre)
    assert call, pre
    quoted = re.findall(r"'([^']*)'|\"([^\"]*)\"", call.group(1))
    return [" ".join((single or double).split()) for single, double in quoted]


def test_the_scriptlets_create_the_shipped_users(packages: Packages) -> None:
    assert pre_install_users(packages.common) == sysusers_lines("neuraxis.conf")
    assert pre_install_users(packages.cortex) == sysusers_lines("neuraxis.conf") + sysusers_lines(
        "neuraxis-cortex.conf"
    )
    assert pre_install_users(packages.neuron_cpu) == sysusers_lines(
        "neuraxis.conf"
    ) + sysusers_lines("neuraxis-neuron.conf")
