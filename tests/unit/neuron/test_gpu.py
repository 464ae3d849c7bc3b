"""GPU generation detection against real device names and compute
capabilities, with NVML faked; and the refusal of a mismatched install."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from axon.generations import Generation, UnsupportedGpuError, check_model_options
from axon.neuron_settings import NeuronSettings
from harness.fake_nvml import FakeNvml
from neuron.gpu import (
    PACKAGED_GENERATIONS,
    check_installed_for,
    detect,
    generation_of,
    host_generation,
)
from neuron.main import detect_generation

# (name NVML reports, compute capability, generation)
REAL_DEVICES = [
    ("NVIDIA A100-SXM4-80GB", (8, 0), Generation.AMPERE),
    ("NVIDIA A10", (8, 6), Generation.AMPERE),
    ("NVIDIA GeForce RTX 3090", (8, 6), Generation.AMPERE),
    ("Orin (nvgpu)", (8, 7), Generation.AMPERE),
    ("NVIDIA L4", (8, 9), Generation.ADA),
    ("NVIDIA GeForce RTX 4090", (8, 9), Generation.ADA),
    ("NVIDIA L40S", (8, 9), Generation.ADA),
    ("NVIDIA H100 80GB HBM3", (9, 0), Generation.HOPPER),
    ("NVIDIA H200", (9, 0), Generation.HOPPER),
    ("NVIDIA B200", (10, 0), Generation.BLACKWELL),
    ("NVIDIA GB300", (10, 3), Generation.BLACKWELL),
    ("NVIDIA GeForce RTX 5090", (12, 0), Generation.BLACKWELL),
    ("NVIDIA DGX Spark GB10", (12, 1), Generation.BLACKWELL),
]


@pytest.mark.parametrize(("name", "capability", "generation"), REAL_DEVICES)
def test_real_devices(name: str, capability: tuple[int, int], generation: Generation) -> None:
    nvml = FakeNvml([(name, capability), (name, capability)])
    devices = detect(nvml)
    assert [d.name for d in devices] == [name, name]
    assert {d.generation for d in devices} == {generation}
    assert host_generation(devices) is generation
    assert nvml.shut_down


def test_no_nvml_or_no_driver_is_cpu() -> None:
    assert host_generation(detect(None)) is Generation.CPU
    assert host_generation(detect(FakeNvml([], fail_init=True))) is Generation.CPU


def test_unknown_capability_and_mixed_hosts_are_refused() -> None:
    with pytest.raises(UnsupportedGpuError, match=r"7\.5"):
        generation_of(7, 5)  # Turing
    mixed = detect(FakeNvml([("NVIDIA A100", (8, 0)), ("NVIDIA L4", (8, 9))]))
    with pytest.raises(UnsupportedGpuError, match="mixes"):
        host_generation(mixed)


def test_generation_profiles_refuse_what_they_lack() -> None:
    with pytest.raises(UnsupportedGpuError, match=r"fp8.*ampere"):
        check_model_options(Generation.AMPERE, None, "fp8")
    check_model_options(Generation.ADA, "fp8", "fp8")
    with pytest.raises(UnsupportedGpuError, match="nvfp4"):
        check_model_options(Generation.HOPPER, "nvfp4", None)
    check_model_options(Generation.BLACKWELL, "nvfp4", "fp8")


def test_mismatched_install_names_both_generations(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnsupportedGpuError) as info:
        check_installed_for(Generation.AMPERE, Generation.BLACKWELL)
    assert "ampere" in str(info.value) and "blackwell" in str(info.value)
    settings = NeuronSettings(generation="ampere")
    with pytest.raises(SystemExit) as stopped:
        detect_generation(settings, FakeNvml([("NVIDIA L4", (8, 9))]))
    assert stopped.value.code == 78
    assert re.search(r"installed for ampere.*host has ada", capsys.readouterr().err)
    ok = detect_generation(NeuronSettings(generation="ada"), FakeNvml([("NVIDIA L4", (8, 9))]))
    assert ok is Generation.ADA


def test_a_host_of_a_packaged_generation_is_told_its_package() -> None:
    with pytest.raises(UnsupportedGpuError) as info:
        check_installed_for(Generation.CPU, Generation.ADA)
    assert str(info.value) == (
        "this neuron is installed for cpu GPUs, but the host has ada; "
        "install the neuraxis-neuron-ada flavour"
    )


@pytest.mark.parametrize("installed", list(Generation))
@pytest.mark.parametrize("detected", list(Generation))
def test_every_refusal_names_only_packages_that_exist(
    installed: Generation, detected: Generation
) -> None:
    """Whatever flavour is installed and whatever the host has (Hopper
    included), the refusal names the one package to install, and it exists."""
    if installed is detected:
        check_installed_for(installed, detected)
        return
    with pytest.raises(UnsupportedGpuError) as info:
        check_installed_for(installed, detected)
    named = set(re.findall(r"neuraxis-neuron-[a-z]+", str(info.value)))
    assert named == {f"neuraxis-neuron-{detected.value}"}
    assert detected in PACKAGED_GENERATIONS


def test_the_packaged_generations_are_the_rpm_flavours(monkeypatch: pytest.MonkeyPatch) -> None:
    """rpm/lock.py builds one neuraxis-neuron-<flavour> per entry of its
    FLAVOURS (besides cortex); the message must not name another."""
    path = Path(__file__).resolve().parents[3] / "rpm" / "lock.py"
    spec = importlib.util.spec_from_file_location("rpm_lock", path)
    assert spec is not None and spec.loader is not None
    lock = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "rpm_lock", lock)  # its dataclasses look it up
    spec.loader.exec_module(lock)
    assert set(lock.FLAVOURS) - {"cortex"} == {g.value for g in PACKAGED_GENERATIONS}


def test_neuron_command_refuses_a_mismatched_generation_here() -> None:
    """This host has no GPU: a neuron installed for Ampere stops at once."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuraxis.cli",
            "neuron",
            "serve",
            "--engine",
            "sim",
            "--generation",
            "ampere",
            "--metrics-port",
            "0",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 78
    assert "installed for ampere" in result.stderr and "host has cpu" in result.stderr
    assert "Traceback" not in result.stderr
