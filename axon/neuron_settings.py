"""The neuron's settings (TOML file, NEURAXIS_NEURON_* environment, flags).

They live in core because both sides use them: the neuron runs from them, and
the cluster controller (in cortex) builds a replica's settings and hands them
to the neuron it starts, serialised, rather than as hand-written flags.

Each field is one setting everywhere: its name is the TOML key, the
environment variable (NEURAXIS_NEURON_<NAME>) and the `neuraxis neuron serve`
option (`--name-with-dashes`, neuraxis/options.py); its description is the
option's help. Adding a setting is adding a field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from axon.adapters import AdapterSource, parse_adapter
from axon.generations import Generation
from axon.logs import LogSettings
from axon.tasks import ModelTask
from axon.tls import TlsFiles, check_plaintext, tls_files
from axon.tracing import TraceSettings

# The bundled models' ids (neuron/models/bundled.py says where they come from).
DEFAULT_CHAT_MODEL = "smollm2-135m-instruct"
DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"
# What a request without max_tokens may generate (the setting says why).
DEFAULT_MAX_TOKENS = 4096


class NeuronSettings(LogSettings, TraceSettings):
    model_config = SettingsConfigDict(env_prefix="NEURAXIS_NEURON_", extra="forbid")

    host: str = Field("127.0.0.1", description="gRPC listen address")
    port: int = Field(50051, ge=0, le=65535, description="gRPC port")
    engine: Literal["vllm", "sim"] = Field("vllm", description="engine")
    model: str = Field(
        DEFAULT_CHAT_MODEL,
        description="bundled model id (prepared into the cache on start), model directory, "
        "or Hugging Face repo id (org/name: vLLM fetches it into the hub cache, HF_HOME)",
    )
    revision: str | None = Field(
        None,
        min_length=1,
        description="the repo id's pinned revision: a branch, tag or commit (default: main)",
    )
    task: ModelTask = Field(
        ModelTask.GENERATE,
        description="what a model directory does (bundled models know their task); the sim "
        "engine serves an embedding model with embed",
    )
    served_id: str | None = Field(
        None,
        description="the model id clients ask for (default: the bundled id or the "
        "directory's name)",
    )
    cache_dir: Path | None = Field(
        None, description="model cache directory (default ~/.cache/neuraxis)"
    )
    max_model_len: int | None = Field(
        None, ge=16, description="context length (default: the model's)"
    )
    default_max_tokens: int = Field(
        DEFAULT_MAX_TOKENS,
        ge=0,
        description="the most tokens a request that sets no max_tokens (max_completion_tokens, "
        "max_output_tokens) generates, or the context its prompt leaves if that is fewer; "
        "0: the remaining context. OpenAI's older models' output limit: most answers end "
        "sooner at the model's end-of-sequence token, and a request that names no bound does "
        "not hold an engine slot, and its answer cortex's memory, for a whole long context "
        "(128k tokens on some models)",
    )
    grammar_compile_timeout_s: float = Field(
        30.0,
        ge=0,
        description="a request's JSON schema or grammar is compiled first in a child process of "
        "the neuron's, killed past this many seconds or when the request is cancelled (the "
        "request then gets a 400 naming the field), before vLLM compiles it, which it would not "
        "stop: a usual schema takes milliseconds, 128 KiB of tool schemas 11 s on two busy "
        "cores, a crafted 984-byte one 127 s (vLLM engine; 0: not probed)",
    )
    # The CPU backend takes whole GiB (VLLM_CPU_KVCACHE_SPACE).
    kv_cache_gib: int = Field(1, ge=1, description="KV cache size in whole GiB")
    dtype: str | None = Field(
        None, description="weights dtype (default: the GPU generation's; float32 on the CPU)"
    )
    # Refused at start where the generation lacks them (axon/generations.py).
    quantization: str | None = Field(None, description="vLLM quantisation method")
    kv_cache_dtype: str | None = Field(None, description="KV-cache dtype (e.g. fp8)")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per replica")
    generation: Literal["auto"] | Generation = Field(
        "auto",
        description="the GPU generation this neuron is installed for; it refuses to start "
        "on another (auto: whatever the host has)",
    )
    ray_address: str | None = Field(
        None, description="cluster mode (neuron agent): the Ray head to join (host:port)"
    )
    node_ip: str | None = Field(
        None,
        description="neuron agent: this host's address as the others reach it "
        "(default: Ray's guess)",
    )
    ray_fixed_ports: bool = Field(
        False,
        description="fixed Ray ports and replica port ranges (neurons 50051-50099, metrics "
        "9400-9449), as the firewalld services open them; otherwise free ones",
    )
    tool_parser: str | None = Field(
        None,
        description='vLLM tool parser for tool_choice "auto" (default: the bundled model\'s)',
    )
    reasoning_parser: str | None = Field(
        None,
        description="vLLM reasoning parser (e.g. deepseek_r1) for models that think aloud",
    )
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "fcfs",
        description="the engine's queue order (vLLM's scheduling_policy): fcfs, first come "
        "first served; priority, by the request's priority class (interactive, default, "
        "batch), as cortex's admission gave it",
    )
    max_adapters: int = Field(
        0,
        ge=0,
        description="LoRA adapters held on the engine at once (vLLM's max_loras); a request "
        "for another loads it, evicting the least recently used idle one (0: no LoRA)",
    )
    max_lora_rank: int = Field(
        16, ge=1, description="the highest LoRA rank an adapter may have (vLLM's max_lora_rank)"
    )
    adapters: list[str] = Field(
        default_factory=list,
        description="a LoRA adapter this neuron serves, as ID=DIR (a PEFT directory with "
        "adapter_config.json), loaded when first asked for; needs max_adapters",
    )
    metrics_port: int = Field(
        9400, ge=0, le=65535, description="Prometheus metrics (vLLM's and the neuron's); 0: none"
    )
    drain_timeout_s: float = Field(
        30.0, ge=0, description="seconds in-flight requests get to finish when stopped"
    )
    prepare_threads: int = Field(
        1,
        ge=1,
        description="threads that render chat templates, tokenise and truncate prompts, "
        "off the event loop (vLLM engine)",
    )
    # Mutual TLS (all three or none): the neuron then takes only clients with a
    # certificate from tls_ca, and no plaintext. docs/deploy.md, "Mutual TLS".
    tls_ca: Path | None = Field(
        None, description="mutual TLS: the CA certificate clients' certificates must chain to"
    )
    tls_cert: Path | None = Field(
        None, description="mutual TLS: the neuron's certificate (PEM, signed by tls_ca)"
    )
    tls_key: Path | None = Field(None, description="mutual TLS: tls_cert's private key (PEM)")
    plaintext: bool = Field(
        False,
        description="serve gRPC without TLS, on purpose (refused beside tls_*), with a "
        "warning at every start; without TLS or this, the neuron refuses to start unless it "
        "listens on a loopback address",
    )
    # The simulated engine (tests and benchmarks).
    sim_ttft_s: float = Field(0.01, ge=0, description="sim engine: time to first token (s)")
    sim_itl_s: float = Field(0.005, ge=0, description="sim engine: time between tokens (s)")
    sim_load_s: float = Field(
        0.0,
        ge=0,
        description="sim engine: how long its start holds the event loop, as vLLM's engine "
        "build does (s)",
    )
    sim_fail_after_tokens: int | None = Field(
        None, ge=0, description="sim engine: fail after this many tokens"
    )
    sim_prefix_cache_blocks: int = Field(
        0,
        ge=0,
        description="sim engine: capacity of its modelled prefix cache in blocks (0: none)",
    )
    sim_block_tokens: int = Field(16, gt=0, description="sim engine: tokens per cache block")
    sim_chars_per_token: int = Field(
        4, gt=0, description="sim engine: prompt characters per token (it has no tokenizer)"
    )
    sim_prefill_s_per_token: float = Field(
        0.0, ge=0, description="sim engine: prefill time per uncached prompt token (s)"
    )
    sim_max_running: int = Field(
        0,
        ge=0,
        description="sim engine: requests it runs at once, the rest waiting in its queue in "
        "scheduling_policy's order (0: no limit)",
    )
    sim_adapter_load_s: float = Field(
        0.0, ge=0, description="sim engine: how long loading a LoRA adapter takes (s)"
    )
    sim_generation: Generation | None = Field(
        None,
        description="sim engine: the GPU generation it stands in for (no detection)",
    )

    @model_validator(mode="after")
    def _adapters_need_room(self) -> NeuronSettings:
        for text in self.adapters:
            parse_adapter(text)
        if self.adapters and not self.max_adapters:
            raise ValueError("adapters need max_adapters (how many the engine holds at once)")
        return self

    def adapter_sources(self) -> tuple[AdapterSource, ...]:
        return tuple(parse_adapter(text) for text in self.adapters)

    @model_validator(mode="after")
    def _tls_complete(self) -> NeuronSettings:
        check_plaintext(tls_files(self.tls_ca, self.tls_cert, self.tls_key), self.plaintext)
        return self

    @property
    def tls(self) -> TlsFiles | None:
        """The mutual-TLS files, or None: plaintext gRPC."""
        return tls_files(self.tls_ca, self.tls_cert, self.tls_key)


# The settings `neuraxis neuron agent` reads (and so offers as options); the
# rest are the replicas' business.
AGENT_SETTINGS: tuple[str, ...] = (
    "ray_address",
    "generation",
    "node_ip",
    "ray_fixed_ports",
    "cache_dir",
    "log_format",
    "log_level",
    "json_logs",
    # Handed to the replicas started on the host (their neurons' TLS).
    "tls_ca",
    "tls_cert",
    "tls_key",
    "plaintext",
    # Handed to the replicas too (their traces).
    "otlp_endpoint",
    "otlp_protocol",
    "trace_sample_ratio",
)
