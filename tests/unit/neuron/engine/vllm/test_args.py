"""The vLLM engine arguments per GPU generation: eager only on the CPU, the
profile's dtype unless the model names one, quantisation and KV-cache dtype
refused where the generation lacks them, tensor parallelism, and the
environment (the CPU's KV-cache size). The last test hands them to vLLM's own
AsyncEngineArgs, so a misspelt keyword or value fails here, not on a GPU host."""

from __future__ import annotations

from pathlib import Path

import pytest

from axon.generations import GPU_GENERATIONS, Generation, UnsupportedGpuError
from axon.tasks import ModelTask
from neuron.engine.vllm.args import GPU_COMPILATION, VllmOptions, engine_launch

CPU, AMPERE, ADA, HOPPER, BLACKWELL = (
    Generation.CPU,
    Generation.AMPERE,
    Generation.ADA,
    Generation.HOPPER,
    Generation.BLACKWELL,
)
MODEL = Path("/var/lib/neuraxis/models/qwen")


def options(**overrides: object) -> VllmOptions:
    return VllmOptions(served_id="qwen", model_path=MODEL, **overrides)  # type: ignore[arg-type]


def test_cpu_arguments_exactly() -> None:
    launch = engine_launch(options(kv_cache_gib=3), CPU)
    assert launch.kwargs == {
        "model": str(MODEL),
        "served_model_name": "qwen",
        "runner": "generate",
        "dtype": "float32",
        "kv_cache_dtype": "auto",
        "tensor_parallel_size": 1,
        "enforce_eager": True,
        "disable_log_stats": False,
    }
    assert launch.env == {
        "VLLM_CONFIGURE_LOGGING": "0",
        "VLLM_CPU_KVCACHE_SPACE": "3",
        "NEURAXIS_VLLM_CPU_SEED_FIX": "1",
    }


def test_ada_arguments_exactly_with_the_models_overrides() -> None:
    launch = engine_launch(
        options(
            dtype="float16",
            quantization="fp8",
            kv_cache_dtype="fp8",
            tensor_parallel_size=2,
            max_model_len=8192,
            kv_cache_gib=3,
        ),
        ADA,
    )
    assert launch.kwargs == {
        "model": str(MODEL),
        "served_model_name": "qwen",
        "runner": "generate",
        "dtype": "float16",
        "kv_cache_dtype": "fp8",
        "quantization": "fp8",
        "max_model_len": 8192,
        "tensor_parallel_size": 2,
        "distributed_executor_backend": "mp",
        "enforce_eager": False,
        "compilation_config": {"mode": "VLLM_COMPILE", "cudagraph_mode": "FULL_AND_PIECEWISE"},
        "disable_log_stats": False,
    }
    # The CPU's KV-cache size means nothing on a GPU.
    assert launch.env == {"VLLM_CONFIGURE_LOGGING": "0"}


def test_eager_only_on_the_cpu() -> None:
    assert engine_launch(options(), CPU).kwargs["enforce_eager"] is True
    assert "compilation_config" not in engine_launch(options(), CPU).kwargs
    for generation in GPU_GENERATIONS:
        kwargs = engine_launch(options(), generation).kwargs
        assert kwargs["enforce_eager"] is False, generation
        assert kwargs["compilation_config"] == GPU_COMPILATION, generation


@pytest.mark.parametrize(
    ("generation", "dtype"),
    [
        (CPU, "float32"),
        (AMPERE, "bfloat16"),
        (ADA, "bfloat16"),
        (HOPPER, "bfloat16"),
        (BLACKWELL, "bfloat16"),
    ],
)
def test_dtype_is_the_generations_unless_the_model_names_one(
    generation: Generation, dtype: str
) -> None:
    assert engine_launch(options(), generation).kwargs["dtype"] == dtype
    assert engine_launch(options(dtype="float16"), generation).kwargs["dtype"] == "float16"


@pytest.mark.parametrize("generation", [ADA, HOPPER, BLACKWELL])
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_fp8_kv_cache_is_accepted_from_ada_on(generation: Generation, kv_cache_dtype: str) -> None:
    kwargs = engine_launch(options(kv_cache_dtype=kv_cache_dtype), generation).kwargs
    assert kwargs["kv_cache_dtype"] == kv_cache_dtype


@pytest.mark.parametrize("generation", [CPU, AMPERE])
def test_fp8_kv_cache_is_refused_before_ada(generation: Generation) -> None:
    with pytest.raises(UnsupportedGpuError, match=f"'fp8' is not available on {generation.value}"):
        engine_launch(options(kv_cache_dtype="fp8"), generation)


@pytest.mark.parametrize(
    ("quantization", "accepted", "refused"),
    [
        ("awq", [AMPERE, ADA, HOPPER, BLACKWELL], [CPU]),
        ("fp8", [ADA, HOPPER, BLACKWELL], [CPU, AMPERE]),
        ("nvfp4", [BLACKWELL], [CPU, AMPERE, ADA, HOPPER]),
    ],
)
def test_quantisation_only_where_the_generation_has_it(
    quantization: str, accepted: list[Generation], refused: list[Generation]
) -> None:
    for generation in accepted:
        kwargs = engine_launch(options(quantization=quantization), generation).kwargs
        assert kwargs["quantization"] == quantization
    for generation in refused:
        with pytest.raises(UnsupportedGpuError, match=f"quantization '{quantization}'"):
            engine_launch(options(quantization=quantization), generation)


def test_no_quantisation_and_no_context_limit_unless_asked() -> None:
    kwargs = engine_launch(options(), HOPPER).kwargs
    assert "quantization" not in kwargs
    assert "max_model_len" not in kwargs
    assert kwargs["kv_cache_dtype"] == "auto"


def test_tensor_parallel_runs_workers_in_processes() -> None:
    one = engine_launch(options(), BLACKWELL).kwargs
    assert one["tensor_parallel_size"] == 1 and "distributed_executor_backend" not in one
    four = engine_launch(options(tensor_parallel_size=4), BLACKWELL).kwargs
    assert four["tensor_parallel_size"] == 4
    assert four["distributed_executor_backend"] == "mp"


def test_an_embedding_model_runs_the_pooling_runner() -> None:
    assert engine_launch(options(task=ModelTask.EMBED), ADA).kwargs["runner"] == "pooling"
    assert engine_launch(options(), ADA).kwargs["runner"] == "generate"


def test_the_attention_backend_is_left_to_vllm() -> None:
    # A fixed backend per generation breaks models it cannot run (FLASH_ATTN:
    # an FP8 KV cache on Ada, MLA models); vLLM picks per configuration.
    for generation in Generation:
        kwargs = engine_launch(options(kv_cache_dtype="auto"), generation).kwargs
        assert "attention_backend" not in kwargs and "attention_config" not in kwargs


def test_the_cpu_kv_cache_size_is_the_models() -> None:
    assert engine_launch(options(kv_cache_gib=5), CPU).env["VLLM_CPU_KVCACHE_SPACE"] == "5"
    for generation in GPU_GENERATIONS:
        assert "VLLM_CPU_KVCACHE_SPACE" not in engine_launch(options(), generation).env


@pytest.mark.parametrize("generation", list(Generation))
def test_vllm_takes_the_arguments(generation: Generation) -> None:
    from vllm.config.compilation import CompilationMode, CUDAGraphMode
    from vllm.engine.arg_utils import AsyncEngineArgs

    tp = 1 if generation is CPU else 2
    quantization = "fp8" if generation in (ADA, HOPPER, BLACKWELL) else None
    launch = engine_launch(
        options(tensor_parallel_size=tp, quantization=quantization, max_model_len=4096), generation
    )
    args = AsyncEngineArgs(**launch.kwargs)
    assert args.enforce_eager is (generation is CPU)
    assert args.dtype == launch.kwargs["dtype"]
    assert args.tensor_parallel_size == tp
    if generation is not CPU:
        assert args.compilation_config.mode is CompilationMode.VLLM_COMPILE
        assert args.compilation_config.cudagraph_mode is CUDAGraphMode.FULL_AND_PIECEWISE


def test_a_repo_id_and_its_revision_reach_the_engine_as_they_are() -> None:
    pinned = VllmOptions(served_id="qwen", model_path="Qwen/Qwen3-0.6B", revision="v1.2")
    kwargs = engine_launch(pinned, CPU).kwargs
    assert kwargs["model"] == "Qwen/Qwen3-0.6B"
    # The tokenizer comes from the same repo: pinned to the same revision.
    assert (kwargs["revision"], kwargs["tokenizer_revision"]) == ("v1.2", "v1.2")
    unpinned = engine_launch(
        VllmOptions(served_id="qwen", model_path="Qwen/Qwen3-0.6B"), CPU
    ).kwargs
    assert "revision" not in unpinned and "tokenizer_revision" not in unpinned


def test_vllm_takes_a_repo_id_and_its_revision() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    pinned = VllmOptions(served_id="qwen", model_path="Qwen/Qwen3-0.6B", revision="abc123")
    launch = engine_launch(pinned, CPU)
    args = AsyncEngineArgs(**launch.kwargs)
    assert (args.model, args.revision, args.tokenizer_revision) == (
        "Qwen/Qwen3-0.6B",
        "abc123",
        "abc123",
    )


def test_the_neurons_collector_gets_vllms_own_spans() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    assert "otlp_traces_endpoint" not in engine_launch(options(), CPU).kwargs
    grpc = engine_launch(options(otlp_traces_endpoint="http://c:4317"), CPU)
    assert AsyncEngineArgs(**grpc.kwargs).otlp_traces_endpoint == "http://c:4317"
    assert grpc.env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"
    assert grpc.env["OTEL_SERVICE_NAME"] == "neuraxis-neuron"
    http = engine_launch(
        options(otlp_traces_endpoint="http://c:4318", otlp_protocol="http/protobuf"), CPU
    )
    assert http.kwargs["otlp_traces_endpoint"] == "http://c:4318/v1/traces"
    assert http.env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"


def test_priority_scheduling_only_when_the_model_asks_for_it() -> None:
    default = engine_launch(options(), Generation.ADA).kwargs
    assert "scheduling_policy" not in default
    ordered = engine_launch(options(scheduling_policy="priority"), Generation.ADA).kwargs
    assert ordered["scheduling_policy"] == "priority"


def test_lora_only_when_the_model_holds_adapters() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    assert "enable_lora" not in engine_launch(options(), CPU).kwargs
    lora = engine_launch(options(max_loras=2, max_lora_rank=8), CPU).kwargs
    args = AsyncEngineArgs(**lora)
    assert (args.enable_lora, args.max_loras, args.max_lora_rank) == (True, 2, 8)
