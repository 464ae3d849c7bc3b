"""`neuraxis neuron serve`: build the configured engine and serve it."""

from __future__ import annotations

import logging
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from axon import tracing
from axon.adapters import AdapterSourceError, check_adapter
from axon.generations import (
    EXIT_WRONG_GPU,
    Generation,
    UnsupportedGpuError,
    check_model_options,
)
from axon.logs import configure_logging
from axon.neuron_settings import NeuronSettings
from axon.protomaps import GENERATION_TO_PB
from axon.tasks import ModelTask
from axon.tls import allowed_plaintext
from neuron.engine.base import Engine
from neuron.engine.vllm.args import VllmOptions
from neuron.gpu import check_installed_for, detect, host_generation, load_nvml
from neuron.models.bundled import BUNDLED_MODELS
from neuron.models.prepare import default_cache_dir, model_dir, prepare
from neuron.models.source import HubModel, is_repo_id, misplaced_revision, unknown_source

log = logging.getLogger("neuraxis.neuron")


def build_engine(settings: NeuronSettings, generation: Generation) -> Engine:
    if settings.engine == "sim":
        from neuron.engine.sim import SimEngine, SimOptions
        from neuron.engine.sim_cache import PrefixCacheOptions

        return SimEngine(
            SimOptions(
                served_id=settings.served_id or "sim-model",
                max_context_length=settings.max_model_len or 4096,
                ttft_s=settings.sim_ttft_s,
                itl_s=settings.sim_itl_s,
                load_s=settings.sim_load_s,
                fail_after_tokens=settings.sim_fail_after_tokens,
                default_max_tokens=settings.default_max_tokens,
                task=settings.task,
                max_running=settings.sim_max_running,
                by_priority=settings.scheduling_policy == "priority",
                max_adapters=settings.max_adapters,
                adapters=settings.adapter_sources(),
                adapter_load_s=settings.sim_adapter_load_s,
                prefix_cache=PrefixCacheOptions(
                    capacity_blocks=settings.sim_prefix_cache_blocks,
                    block_tokens=settings.sim_block_tokens,
                    chars_per_token=settings.sim_chars_per_token,
                    prefill_s_per_token=settings.sim_prefill_s_per_token,
                ),
            )
        )
    from neuron.engine.vllm.engine import VllmEngine

    model = resolve_model(settings)
    check_adapters(settings, model)
    return VllmEngine(
        vllm_options(settings, model),
        generation,
        prepare_threads=settings.prepare_threads,
        default_max_tokens=settings.default_max_tokens,
        grammar_timeout_s=settings.grammar_compile_timeout_s,
    )


def vllm_options(settings: NeuronSettings, model: ResolvedModel) -> VllmOptions:
    """The model's engine options; neuron/engine/vllm/args.py adds the
    generation's defaults to them."""
    return VllmOptions(
        served_id=model.served_id,
        model_path=model.path,
        revision=model.revision,
        task=model.task,
        dtype=settings.dtype,
        quantization=settings.quantization,
        kv_cache_dtype=settings.kv_cache_dtype,
        tensor_parallel_size=settings.tensor_parallel_size,
        max_model_len=settings.max_model_len,
        kv_cache_gib=settings.kv_cache_gib,
        tool_parser=settings.tool_parser or model.tool_parser,
        reasoning_parser=settings.reasoning_parser,
        otlp_traces_endpoint=settings.otlp_endpoint,
        otlp_protocol=settings.otlp_protocol,
        scheduling_policy=settings.scheduling_policy,
        max_loras=settings.max_adapters,
        max_lora_rank=settings.max_lora_rank,
        adapters=settings.adapter_sources(),
    )


@dataclass(frozen=True)
class ResolvedModel:
    # A model directory, or a Hugging Face repo id vLLM resolves itself.
    path: Path | str
    served_id: str
    task: ModelTask
    tool_parser: str | None
    revision: str | None = None


def resolve_model(settings: NeuronSettings, prepare_bundled: bool = True) -> ResolvedModel:
    """A bundled model id is prepared into the cache (or, without
    `prepare_bundled`, only located there); a directory with a config.json
    is loaded as it is; a Hugging Face repo id goes to vLLM as it is, after
    `check_hub_cache` in offline mode."""
    bundled = BUNDLED_MODELS.get(settings.model)
    path = Path(settings.model).expanduser()
    if settings.revision is not None and (bundled or (path / "config.json").is_file()):
        raise SystemExit(f"neuron: {misplaced_revision(settings.model, settings.revision)}")
    if bundled is not None:
        cache = settings.cache_dir or default_cache_dir()
        if prepare_bundled:
            path = prepare(cache, bundled, lambda line: log.info("%s", line))
        else:
            path = model_dir(cache, bundled.served_id)
        return ResolvedModel(
            path, settings.served_id or bundled.served_id, bundled.task, bundled.tool_parser
        )
    task = settings.task
    if (path / "config.json").is_file():
        return ResolvedModel(path, settings.served_id or path.name, task, None)
    if is_repo_id(settings.model):
        check_hub_cache(HubModel(settings.model, settings.revision))
        served_id = settings.served_id or settings.model
        return ResolvedModel(settings.model, served_id, task, None, settings.revision)
    raise SystemExit(f"neuron: model {unknown_source(settings.model, BUNDLED_MODELS)}")


def check_adapters(settings: NeuronSettings, model: ResolvedModel) -> None:
    """An adapter vLLM could not load (no adapter_config.json, a rank above
    max_lora_rank, another base model) stops the neuron here, naming it."""
    for adapter in settings.adapter_sources():
        try:
            check_adapter(
                adapter.source, settings.max_lora_rank, (str(model.path), model.served_id)
            )
        except AdapterSourceError as e:
            raise SystemExit(f"neuron: adapter '{adapter.id}': {e}") from None


def check_hub_cache(model: HubModel) -> None:
    """In offline mode, a repo whose files are not in the hub cache stops
    the neuron here, naming the repo, the cache and the command that
    fetches it; online, vLLM fetches what is missing as it starts."""
    from neuron.models.hub import HubError, hub_cache, locate, offline_mode

    if not offline_mode():
        log.info("model %s: from the hub cache %s, fetched if missing", model, hub_cache())
        return
    try:
        snapshot = locate(model, hub_cache())
    except HubError as e:
        raise SystemExit(f"neuron: {e}") from None
    log.info("model %s: in the hub cache at %s", model, snapshot)


def detect_generation(settings: NeuronSettings, nvml: Any | None) -> Generation:
    """The host's GPU generation, checked against the one the neuron is
    installed for; a mismatch stops the neuron with both named."""
    if settings.engine == "sim" and settings.sim_generation:
        # The simulated engine uses no GPU: it stands in for one of the
        # generation it was placed on (placement and failover tests).
        return Generation(settings.sim_generation)
    try:
        detected = host_generation(detect(nvml))
        if settings.generation != "auto":
            check_installed_for(Generation(settings.generation), detected)
        check_model_options(detected, settings.quantization, settings.kv_cache_dtype)
    except UnsupportedGpuError as e:
        print(f"neuron: {e}", file=sys.stderr)
        raise SystemExit(EXIT_WRONG_GPU) from None
    return detected


def run_event_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run the neuron's server on uvloop, as vLLM's own server runs: every
    streamed token passes through the loop (engine output, gRPC write), and
    uvloop spends less CPU a message than asyncio's loop, CPU the engine
    shares on a small host."""
    return uvloop.run(main)


def run(settings: NeuronSettings) -> int:
    from neuron.server import serve, server_credentials

    configure_logging(settings.log_format, settings.log_level)
    tracing.configure("neuraxis-neuron", settings)
    link = f"the listener on {settings.host}:{settings.port}"
    if settings.tls is None and not allowed_plaintext(
        log, "neuron", link, settings.plaintext, [settings.host]
    ):
        return 2
    # Read before the engine loads: a missing file stops the neuron at once.
    credentials = server_credentials(settings.tls) if settings.tls else None
    generation = detect_generation(settings, load_nvml())
    log.info("GPU generation: %s", generation.value)
    engine = build_engine(settings, generation)
    # Non-zero when the engine died: the supervisor starts a new neuron.
    return run_event_loop(
        serve(
            engine,
            host=settings.host,
            port=settings.port,
            generation=GENERATION_TO_PB[generation],
            drain_timeout_s=settings.drain_timeout_s,
            metrics_port=settings.metrics_port,
            credentials=credentials,
        )
    )
