"""The GPUs through NVML: the driver, each device (name, memory, compute
capability, generation), mixed generations, and the installed flavour
against what the host has."""

from __future__ import annotations

from typing import Any

from axon.generations import Generation
from neuraxis.doctor.finding import Finding, Status
from neuraxis.doctor.host import Host

AREA = "gpus"
# The GPU flavours' torch is built with CUDA 13.0, which needs this driver.
MIN_DRIVER_MAJOR = 580


def check(host: Host) -> list[Finding]:
    scan = host.gpus
    if scan.nvml is None:
        return [_no_gpus(host, "nvidia-ml-py (pynvml) is not installed")]
    if scan.error:
        return [
            Finding(
                AREA,
                "devices",
                Status.FAIL,
                scan.error,
                "neuraxis runs on Ampere, Ada, Hopper and Blackwell GPUs: move this host's "
                "other GPUs out, or hide them from the services (CUDA_VISIBLE_DEVICES)",
            )
        ]
    if not scan.devices:
        return [_no_gpus(host, "NVML reports no NVIDIA GPU (no driver, or no device)")]
    findings = [_driver(scan.nvml)]
    for d in scan.devices:
        findings.append(
            Finding(
                AREA,
                f"gpu{d.index}",
                Status.OK,
                f"{d.name}, {d.memory_bytes / 2**30:.1f} GiB, compute capability "
                f"{d.capability[0]}.{d.capability[1]}: {d.generation.value}",
            )
        )
    generations = sorted({d.generation.value for d in scan.devices})
    if len(generations) > 1:
        findings.append(
            Finding(
                AREA,
                "generations",
                Status.FAIL,
                f"this host mixes GPU generations ({', '.join(generations)}); a neuron runs on one",
                "keep one generation a host: move the others to a host of their own",
            )
        )
        return findings
    findings.append(_flavour(host, Generation(generations[0])))
    return findings


def _no_gpus(host: Host, why: str) -> Finding:
    """No GPU to read: right for a CPU neuron or a head host, wrong for a
    GPU flavour."""
    installed = host.neuron.generation if host.neuron else None
    if isinstance(installed, Generation) and installed is not Generation.CPU:
        return Finding(
            AREA,
            "nvml",
            Status.FAIL,
            f"{why}, but the neuron is installed for {installed.value} GPUs",
            "install the NVIDIA driver (580 or newer) and check `nvidia-smi`; on a host "
            "without GPUs install neuraxis-neuron-cpu instead",
        )
    return Finding(AREA, "nvml", Status.OK, f"{why}: a CPU host")


def _driver(nvml: Any) -> Finding:
    try:
        nvml.nvmlInit()
        try:
            version = nvml.nvmlSystemGetDriverVersion()
        finally:
            nvml.nvmlShutdown()
    except Exception as e:  # an NVML without the call: NVMLError_FunctionNotFound
        return Finding(AREA, "driver", Status.WARN, f"NVML gives no driver version ({e})")
    version = version.decode() if isinstance(version, bytes) else str(version)
    try:
        major = int(version.split(".")[0])
    except ValueError:
        return Finding(AREA, "driver", Status.WARN, f"driver version {version!r} unreadable")
    if major < MIN_DRIVER_MAJOR:
        return Finding(
            AREA,
            "driver",
            Status.FAIL,
            f"NVIDIA driver {version}; the GPU flavours' torch (CUDA 13.0) needs "
            f"{MIN_DRIVER_MAJOR} or newer",
            f"upgrade the NVIDIA driver to {MIN_DRIVER_MAJOR} or newer",
        )
    return Finding(AREA, "driver", Status.OK, f"NVIDIA driver {version}")


def _flavour(host: Host, detected: Generation) -> Finding:
    package = f"neuraxis-neuron-{detected.value}"
    if host.neuron_file is None or host.neuron is None:
        return Finding(
            AREA, "flavour", Status.OK, f"{detected.value} GPUs: this host's package is {package}"
        )
    installed = host.neuron.generation
    if installed == "auto" or installed is detected:
        how = "auto" if installed == "auto" else f'"{detected.value}"'
        return Finding(
            AREA,
            "flavour",
            Status.OK,
            f"{host.neuron_file} says generation = {how}; the host is {detected.value}",
        )
    assert isinstance(installed, Generation)
    return Finding(
        AREA,
        "flavour",
        Status.FAIL,
        f"the neuron is installed for {installed.value} ({host.neuron_file}: generation = "
        f'"{installed.value}"), but the host has {detected.value} GPUs: '
        "neuraxis-neuron.service will refuse to start (exit 78)",
        f"dnf swap neuraxis-neuron-{installed.value} {package}",
    )
