"""The cluster's vocabulary of GPU generations, shared by cortex (placement,
the deployment spec) and the neuron (detection, engine defaults).

A neuron runs on one generation; no GPU is `cpu`. Each generation has a profile
of engine defaults and of what it supports, so that a model asking for something
its generation lacks (an FP8 KV cache on Ampere, say) is refused with a reason
before any CUDA error. NVML detection lives in neuron/gpu.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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


class UnsupportedGpuError(Exception):
    pass


# The exit status of a neuron (or host agent) refused by its hardware:
# sysexits' EX_CONFIG, which systemd is told not to retry (the flavour is wrong).
EXIT_WRONG_GPU = 78


@dataclass(frozen=True)
class Profile:
    """Engine defaults and abilities of a generation (dtype, quantisation and
    KV-cache dtype are overridable per model; neuron/engine/vllm/args.py turns
    a profile and a model's options into vLLM's engine arguments).

    There is no attention backend here: vLLM picks one per model and
    configuration (MLA or not, head size, KV-cache dtype), and a fixed one per
    generation is wrong for some of them (FLASH_ATTN refuses an FP8 KV cache
    on Ada and every MLA model), so vLLM's own choice is left in place."""

    dtype: str
    # torch.compile and CUDA graphs; False runs the model eagerly.
    compiled: bool
    quantizations: frozenset[str]
    kv_cache_dtypes: frozenset[str]


PROFILES: dict[Generation, Profile] = {
    Generation.CPU: Profile(
        dtype="float32",  # bfloat16 gives nonsense from small models on CPU
        compiled=False,  # CPU warm-up compilation stalls for minutes
        quantizations=frozenset(),
        kv_cache_dtypes=frozenset({"auto"}),
    ),
    Generation.AMPERE: Profile(
        dtype="bfloat16",
        compiled=True,
        quantizations=frozenset({"awq", "gptq", "bitsandbytes", "compressed-tensors"}),
        kv_cache_dtypes=frozenset({"auto"}),
    ),
    Generation.ADA: Profile(
        dtype="bfloat16",
        compiled=True,
        quantizations=frozenset({"awq", "gptq", "bitsandbytes", "compressed-tensors", "fp8"}),
        kv_cache_dtypes=frozenset({"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}),
    ),
    Generation.HOPPER: Profile(
        dtype="bfloat16",
        compiled=True,
        quantizations=frozenset({"awq", "gptq", "bitsandbytes", "compressed-tensors", "fp8"}),
        kv_cache_dtypes=frozenset({"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}),
    ),
    Generation.BLACKWELL: Profile(
        dtype="bfloat16",
        compiled=True,
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


# The values settings and command-line choices accept, derived from the enum
# so that a new generation is one edit.
GENERATION_NAMES: tuple[str, ...] = tuple(g.value for g in Generation)
