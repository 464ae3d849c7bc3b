"""GPU detection with NVML: which devices a host has and their generation.

The compute capability decides it: 8.0/8.6/8.7 Ampere, 8.9 Ada, 9.0 Hopper,
10.x/12.x Blackwell; no GPU (or no NVML) is `cpu`. The generations and their
profiles are the cluster's vocabulary, in axon/generations.py.

NVML is reached through the `nvidia-ml-py` package when it is installed; the
detection takes the NVML module as a parameter so that tests can pass a fake
one with real device names and capabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from axon.generations import Generation, UnsupportedGpuError


def generation_of(major: int, minor: int) -> Generation:
    """The generation of a CUDA compute capability."""
    if major == 8 and minor in (0, 6, 7):
        return Generation.AMPERE
    if (major, minor) == (8, 9):
        return Generation.ADA
    if major == 9:
        return Generation.HOPPER
    if major in (10, 12):
        return Generation.BLACKWELL
    raise UnsupportedGpuError(
        f"compute capability {major}.{minor} is not a supported GPU generation "
        "(Ampere 8.0/8.6/8.7, Ada 8.9, Hopper 9.0, Blackwell 10.x/12.x)"
    )


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    memory_bytes: int
    capability: tuple[int, int]
    generation: Generation


def load_nvml() -> Any | None:
    """The pynvml module (from nvidia-ml-py), or None where it is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def detect(nvml: Any | None) -> list[Device]:
    """The GPUs NVML sees; [] when there is no NVML or no NVIDIA driver."""
    if nvml is None:
        return []
    try:
        nvml.nvmlInit()
    except Exception:  # no driver: NVMLError_LibraryNotFound / DriverNotLoaded
        return []
    try:
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle).total
            devices.append(
                Device(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    memory_bytes=int(memory),
                    capability=(int(major), int(minor)),
                    generation=generation_of(int(major), int(minor)),
                )
            )
        return devices
    finally:
        nvml.nvmlShutdown()


def host_generation(devices: list[Device]) -> Generation:
    """The host's one generation; mixed generations on one host are refused
    (a neuron runs on one generation)."""
    generations = {d.generation for d in devices}
    if not generations:
        return Generation.CPU
    if len(generations) > 1:
        found = ", ".join(f"{d.index}: {d.name} ({d.generation.value})" for d in devices)
        raise UnsupportedGpuError(f"this host mixes GPU generations ({found})")
    return generations.pop()


# The generations a neuraxis-neuron-<flavour> package is built for: rpm/lock.py's
# FLAVOURS (a unit test keeps the two equal). Every generation has one, so the
# refusal below can always name the package to install.
PACKAGED_GENERATIONS: tuple[Generation, ...] = tuple(Generation)


def check_installed_for(expected: Generation, detected: Generation) -> None:
    """A neuron installed for one generation refuses to run on another."""
    if expected is not detected:
        raise UnsupportedGpuError(
            f"this neuron is installed for {expected.value} GPUs, but the host has "
            f"{detected.value}; install the neuraxis-neuron-{detected.value} flavour"
        )
