"""GPU generations: detecting them with NVML, and what each one can run.

A neuron runs on one generation. The compute capability decides it:
8.0/8.6/8.7 Ampere, 8.9 Ada, 9.0 Hopper, 10.x/12.x Blackwell; no GPU (or no
NVML) is `cpu`. Each generation has a profile of engine defaults and of what
it supports, so that a model asking for something its generation lacks (an
FP8 KV cache on Ampere, say) is refused with a reason before any CUDA error.

NVML is reached through the `nvidia-ml-py` package when it is installed; the
detection takes the NVML module as a parameter so that tests can pass a fake
one with real device names and capabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Generation(Enum):
    CPU = "cpu"
    AMPERE = "ampere"
    ADA = "ada"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"


# The Ray node label a host agent sets to its generation; placement selects on it.
GENERATION_LABEL = "neuraxis.io/generation"

# The GPU generations, oldest first ("ada or newer" means a suffix of this).
GPU_GENERATIONS: tuple[Generation, ...] = (
    Generation.AMPERE,
    Generation.ADA,
    Generation.HOPPER,
    Generation.BLACKWELL,
)


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


class UnsupportedGpuError(Exception):
    pass


# The exit status of a neuron (or host agent) refused by its hardware:
# sysexits' EX_CONFIG, which systemd is told not to retry (the flavour is wrong).
EXIT_WRONG_GPU = 78


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    memory_bytes: int
    capability: tuple[int, int]
    generation: Generation


@dataclass(frozen=True)
class Profile:
    """Engine defaults and abilities of a generation (overridable per model)."""

    dtype: str
    attention_backend: str | None
    quantizations: frozenset[str]
    kv_cache_dtypes: frozenset[str]


PROFILES: dict[Generation, Profile] = {
    Generation.CPU: Profile(
        dtype="float32",  # bfloat16 gives nonsense from small models on CPU
        attention_backend=None,
        quantizations=frozenset(),
        kv_cache_dtypes=frozenset({"auto"}),
    ),
    Generation.AMPERE: Profile(
        dtype="bfloat16",
        attention_backend="FLASH_ATTN",
        quantizations=frozenset({"awq", "gptq", "bitsandbytes", "compressed-tensors"}),
        kv_cache_dtypes=frozenset({"auto"}),
    ),
    Generation.ADA: Profile(
        dtype="bfloat16",
        attention_backend="FLASH_ATTN",
        quantizations=frozenset({"awq", "gptq", "bitsandbytes", "compressed-tensors", "fp8"}),
        kv_cache_dtypes=frozenset({"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}),
    ),
    Generation.HOPPER: Profile(
        dtype="bfloat16",
        attention_backend="FLASH_ATTN",
        quantizations=frozenset({"awq", "gptq", "bitsandbytes", "compressed-tensors", "fp8"}),
        kv_cache_dtypes=frozenset({"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}),
    ),
    Generation.BLACKWELL: Profile(
        dtype="bfloat16",
        attention_backend="FLASHINFER",
        quantizations=frozenset(
            {"awq", "gptq", "bitsandbytes", "compressed-tensors", "fp8", "nvfp4", "mxfp4"}
        ),
        kv_cache_dtypes=frozenset({"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}),
    ),
}


def check_model_options(
    generation: Generation, quantization: str | None, kv_cache_dtype: str | None
) -> None:
    """Refuse, with the reason, options the generation cannot run."""
    profile = PROFILES[generation]
    if quantization and quantization not in profile.quantizations:
        raise UnsupportedGpuError(
            f"quantization '{quantization}' is not available on {generation.value}; "
            f"it supports: {', '.join(sorted(profile.quantizations)) or 'none'}"
        )
    if kv_cache_dtype and kv_cache_dtype not in profile.kv_cache_dtypes:
        raise UnsupportedGpuError(
            f"KV-cache dtype '{kv_cache_dtype}' is not available on {generation.value}; "
            f"it supports: {', '.join(sorted(profile.kv_cache_dtypes))}"
        )


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


def check_installed_for(expected: Generation, detected: Generation) -> None:
    """A neuron installed for one generation refuses to run on another."""
    if expected is not detected:
        raise UnsupportedGpuError(
            f"this neuron is installed for {expected.value} GPUs, but the host has "
            f"{detected.value}; install the neuraxis-neuron-{detected.value} flavour"
        )
