"""The exact arguments a vLLM engine starts with, from a model's options and its
GPU generation's profile only.

`engine_launch` gives the keyword arguments of vLLM's `AsyncEngineArgs` and the
environment variables vLLM reads. The engine starts from them
(engine.py) and `neuraxis neuron serve --print-engine-args` prints them, so
what is printed is what runs. Nothing here imports vLLM: printing needs no
engine. How a neuron's settings become `VllmOptions` lives in neuron/main.py.

The per-generation choices:
- the CPU runs eagerly (its warm-up compilation stalls for minutes); every GPU
  generation runs vLLM's compilation with CUDA graphs, stated explicitly
  (vLLM's V1 defaults) so that the printout shows them;
- dtype from the profile unless the model names one; quantisation and
  KV-cache dtype as the model asks, refused where the profile lacks them;
- no attention backend: vLLM chooses one per model (see Profile);
- the CPU backend's KV cache is `VLLM_CPU_KVCACHE_SPACE` GiB; on a GPU vLLM
  sizes it from its share of GPU memory (`gpu_memory_utilization`, 0.9).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from axon.adapters import AdapterSource
from axon.generations import PROFILES, Generation, check_model_options
from axon.tasks import ModelTask
from axon.tracing import OtlpProtocol, http_traces_url
from neuron.engine.vllm.cpu_seed import CPU_SEED_FIX_ENV

# vLLM's compilation on a GPU: its Inductor-based compiler and CUDA graphs for
# decode batches (FULL) and for mixed batches (PIECEWISE, between attention).
GPU_COMPILATION: dict[str, str] = {"mode": "VLLM_COMPILE", "cudagraph_mode": "FULL_AND_PIECEWISE"}


@dataclass(frozen=True)
class VllmOptions:
    """One model's engine options (a neuron's settings, or a deployment
    spec's `[models.engine]` passed down as flags)."""

    served_id: str
    # A model directory, or a Hugging Face repo id (`org/name`) that vLLM
    # resolves into the host's hub cache (neuron/models/hub.py).
    model_path: Path | str
    # The repo id's pinned revision (branch, tag or commit); None: main.
    revision: str | None = None
    task: ModelTask = ModelTask.GENERATE
    # None: the generation's (float32 on the CPU, bfloat16 on GPUs).
    dtype: str | None = None
    max_model_len: int | None = None
    # The CPU backend's KV cache in whole GiB (unused on GPUs).
    kv_cache_gib: int = 1
    # One of vLLM's tool parsers (e.g. "hermes"); enables tool_choice "auto".
    tool_parser: str | None = None
    # One of vLLM's reasoning parsers (e.g. "deepseek_r1"), for models that
    # think before they answer: their thoughts go to reasoning_content.
    reasoning_parser: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int = 1
    # vLLM's own OpenTelemetry spans (its request's queue, prefill and
    # decode) go to the neuron's collector, in the neuron's trace.
    otlp_traces_endpoint: str | None = None
    otlp_protocol: OtlpProtocol = "grpc"
    # vLLM's queue order: "priority" runs the requests of higher classes first.
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    # LoRA: adapters held at once (0: LoRA off), their highest rank, and
    # the adapters the engine may serve (loaded on demand, engine.py).
    max_loras: int = 0
    max_lora_rank: int = 16
    adapters: tuple[AdapterSource, ...] = ()


@dataclass(frozen=True)
class EngineLaunch:
    """`AsyncEngineArgs(**kwargs)` in a process whose environment has `env`."""

    kwargs: dict[str, Any]
    env: dict[str, str]

    def as_json(self, generation: Generation) -> dict[str, Any]:
        return {"generation": generation.value, "engine_args": self.kwargs, "env": self.env}


def engine_launch(options: VllmOptions, generation: Generation) -> EngineLaunch:
    """The engine's arguments on `generation`; UnsupportedGpuError (with the
    reason) for a quantisation or KV-cache dtype the generation lacks."""
    check_model_options(generation, options.quantization, options.kv_cache_dtype)
    profile = PROFILES[generation]
    kwargs: dict[str, Any] = {
        "model": str(options.model_path),
        "served_model_name": options.served_id,
        "runner": "pooling" if options.task is ModelTask.EMBED else "generate",
        "dtype": options.dtype or profile.dtype,
        "kv_cache_dtype": options.kv_cache_dtype or "auto",
        "tensor_parallel_size": options.tensor_parallel_size,
        "enforce_eager": not profile.compiled,
        # The scheduler's counts feed Load (engine.py's stats sink).
        "disable_log_stats": False,
    }
    if profile.compiled:
        kwargs["compilation_config"] = dict(GPU_COMPILATION)
    if options.tensor_parallel_size > 1:
        # Worker processes on the GPUs this replica holds (Ray's num_gpus,
        # CUDA_VISIBLE_DEVICES); the neuron itself is no Ray worker.
        kwargs["distributed_executor_backend"] = "mp"
    if options.revision:
        # The tokenizer is loaded from the same repo, and vLLM takes its
        # revision apart (main when not given): both pinned alike.
        kwargs["revision"] = options.revision
        kwargs["tokenizer_revision"] = options.revision
    if options.quantization:
        kwargs["quantization"] = options.quantization
    if options.max_model_len is not None:
        kwargs["max_model_len"] = options.max_model_len
    if options.otlp_traces_endpoint:
        endpoint = options.otlp_traces_endpoint
        if options.otlp_protocol == "http/protobuf":
            endpoint = http_traces_url(endpoint)  # vLLM's HTTP exporter takes the full URL
        kwargs["otlp_traces_endpoint"] = endpoint
    if options.scheduling_policy != "fcfs":
        kwargs["scheduling_policy"] = options.scheduling_policy
    if options.max_loras:
        # The adapters come later, one add_lora each (engine.py), not as
        # vLLM's lora_modules: this neuron decides which are held.
        kwargs.update(
            enable_lora=True, max_loras=options.max_loras, max_lora_rank=options.max_lora_rank
        )
    return EngineLaunch(kwargs=kwargs, env=_env(options, generation))


def _env(options: VllmOptions, generation: Generation) -> dict[str, str]:
    # vLLM's loggers go through ours (JSON) instead of their own handler.
    env = {"VLLM_CONFIGURE_LOGGING": "0"}
    if options.otlp_traces_endpoint:
        # vLLM picks its exporter, and names its spans' service, by the
        # standard variables: its spans are the neuron's.
        env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = options.otlp_protocol
        env["OTEL_SERVICE_NAME"] = "neuraxis-neuron"
    if generation is Generation.CPU:
        # The engine core is a child process and inherits it.
        env["VLLM_CPU_KVCACHE_SPACE"] = str(options.kv_cache_gib)
        # vLLM's worker process loads cpu_seed.py as a plugin; this turns it on.
        env[CPU_SEED_FIX_ENV] = "1"
    return env
