"""The neuron's settings (TOML file, NEURAXIS_NEURON_* environment, flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from neuron.models.bundled import DEFAULT_CHAT_MODEL


class NeuronSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="NEURAXIS_NEURON_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(50051, ge=0, le=65535)
    engine: Literal["vllm", "sim"] = "vllm"
    # A bundled model's id (prepared into the cache on start) or a model
    # directory on disk.
    model: str = DEFAULT_CHAT_MODEL
    # The id clients ask for; defaults to the bundled id or the directory name.
    served_id: str | None = None
    cache_dir: Path | None = None
    max_model_len: int | None = Field(None, ge=16)
    kv_cache_gib: float = Field(1.0, gt=0)
    dtype: str = "float32"
    # Seconds in-flight requests get to finish when the neuron is stopped.
    drain_timeout_s: float = Field(30.0, ge=0)
    # Simulated engine only (tests and benchmarks).
    sim_ttft_s: float = Field(0.01, ge=0)
    sim_itl_s: float = Field(0.005, ge=0)
    sim_fail_after_tokens: int | None = Field(None, ge=0)
