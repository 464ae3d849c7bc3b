from __future__ import annotations

import pytest

from axon.generations import Generation
from axon.neuron_settings import NeuronSettings
from axon.tasks import ModelTask
from cortex.cluster.replica_settings import replica_settings, settings_env
from cortex.cluster.spec import ModelSpec


def _model(**fields: object) -> ModelSpec:
    return ModelSpec.model_validate({"id": "m", "source": "s", **fields})


def test_neuron_settings_take_the_generation_profile_defaults() -> None:
    model = _model(min_generation="ada", max_context=2048, engine={"kv_cache_dtype": "fp8"})
    settings = replica_settings(model, Generation.ADA)
    assert (settings.engine, settings.served_id, settings.generation) == (
        "vllm",
        "m",
        Generation.ADA,
    )
    assert settings.model == "s"
    assert settings.dtype == "bfloat16"
    assert settings.kv_cache_dtype == "fp8"
    assert settings.max_model_len == 2048
    cpu = replica_settings(_model(generations=["cpu"]), Generation.CPU)
    assert cpu.dtype == "float32"


def test_simulated_replicas_take_their_timing() -> None:
    model = _model(generations=["ada"], engine={"kind": "sim", "sim_ttft_s": 0.2})
    settings = replica_settings(model, Generation.ADA)
    env = settings_env(settings)
    assert "NEURAXIS_NEURON_MODEL" not in env and "NEURAXIS_NEURON_GENERATION" not in env
    assert env["NEURAXIS_NEURON_SIM_GENERATION"] == "ada"
    assert env["NEURAXIS_NEURON_SIM_TTFT_S"] == "0.2"


def test_the_controller_s_environment_does_not_leak_into_a_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEURAXIS_NEURON_DTYPE", "float16")
    settings = replica_settings(_model(generations=["cpu"]), Generation.CPU)
    assert settings.dtype == "float32"
    monkeypatch.setenv("NEURAXIS_NEURON_REASONING_PARSER", "deepseek_r1")
    assert "NEURAXIS_NEURON_REASONING_PARSER" not in settings_env(settings)


def test_the_environment_reads_back_as_the_same_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(
        min_generation="ada",
        task="embed",
        max_context=512,
        tensor_parallel_size=2,
        engine={
            "quantization": "fp8",
            "kv_cache_dtype": "fp8",
            "kv_cache_gib": 3,
            "tool_parser": "hermes",
            "reasoning_parser": "deepseek_r1",
        },
    )
    settings = replica_settings(model, Generation.BLACKWELL)
    env = settings_env(settings)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    read = NeuronSettings.model_validate({})
    assert read.model_dump() == settings.model_dump()
    assert read.task is ModelTask.EMBED and read.tensor_parallel_size == 2
    assert read.generation is Generation.BLACKWELL


def test_a_repo_ids_revision_reaches_the_neuron() -> None:
    model = _model(source="Qwen/Qwen3-0.6B", revision="v1.2", generations=["cpu"])
    env = settings_env(replica_settings(model, Generation.CPU))
    assert env["NEURAXIS_NEURON_MODEL"] == "Qwen/Qwen3-0.6B"
    assert env["NEURAXIS_NEURON_REVISION"] == "v1.2"
    assert "NEURAXIS_NEURON_REVISION" not in settings_env(
        replica_settings(_model(generations=["cpu"]), Generation.CPU)
    )
