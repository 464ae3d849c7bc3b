"""The neuron's settings (TOML file, NEURAXIS_NEURON_* environment, flags).

They live in core because both sides use them: the neuron runs from them, and
the cluster controller (in cortex) builds a replica's settings and hands them
to the neuron it starts, serialised, rather than as hand-written flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from neuraxis.core.generations import Generation
from neuraxis.core.tasks import ModelTask

# The bundled models' ids (neuron/models/bundled.py says where they come from).
DEFAULT_CHAT_MODEL = "smollm2-135m-instruct"
DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"


class NeuronSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NEURAXIS_NEURON_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(50051, ge=0, le=65535)
    engine: Literal["vllm", "sim"] = "vllm"
    # A bundled model's id (prepared into the cache on start) or a model
    # directory on disk.
    model: str = DEFAULT_CHAT_MODEL
    # For a model directory: what it does (bundled models know their task).
    task: ModelTask = ModelTask.GENERATE
    # The id clients ask for; defaults to the bundled id or the directory name.
    served_id: str | None = None
    cache_dir: Path | None = None
    max_model_len: int | None = Field(None, ge=16)
    # The CPU backend takes whole GiB (VLLM_CPU_KVCACHE_SPACE).
    kv_cache_gib: int = Field(1, ge=1)
    # None: the GPU generation's default (float32 on the CPU).
    dtype: str | None = None
    # vLLM quantisation and KV-cache dtype; refused where the generation lacks them.
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int = Field(1, ge=1)
    # The GPU generation this neuron is installed for; it refuses to start on
    # another. "auto": whatever the host has.
    generation: Literal["auto"] | Generation = "auto"
    # Cluster mode (`neuraxis neuron agent`): the Ray head to join (host:port).
    ray_address: str | None = None
    # The address this host is reached at by the others; default: Ray's guess.
    node_ip: str | None = None
    # Fixed Ray ports and replica port ranges (neurons 50051-50099, metrics
    # 9400-9449), as the firewalld services open them; otherwise free ones.
    ray_fixed_ports: bool = False
    # vLLM tool parser for tool_choice "auto"; defaults to the bundled model's.
    tool_parser: str | None = None
    # vLLM reasoning parser (e.g. "deepseek_r1") for models that think aloud.
    reasoning_parser: str | None = None
    # Prometheus metrics (vLLM's and the neuron's) on this port; 0: none.
    metrics_port: int = Field(9400, ge=0, le=65535)
    # Log lines as JSON objects (one per line), or as plain text.
    json_logs: bool = True
    # Seconds in-flight requests get to finish when the neuron is stopped.
    drain_timeout_s: float = Field(30.0, ge=0)
    # Simulated engine only (tests and benchmarks).
    sim_ttft_s: float = Field(0.01, ge=0)
    sim_itl_s: float = Field(0.005, ge=0)
    sim_fail_after_tokens: int | None = Field(None, ge=0)
    # The GPU generation the simulated engine stands in for (no detection).
    sim_generation: Generation | None = None
