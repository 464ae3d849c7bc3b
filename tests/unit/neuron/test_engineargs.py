"""`neuraxis neuron serve --print-engine-args`: the configured generation
without detection (or the detected one with "auto"), a bundled model located
but not prepared, serve's refusals and exit status, and the JSON it prints."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from axon.generations import EXIT_WRONG_GPU, Generation
from axon.neuron_settings import NeuronSettings
from harness.fake_nvml import FakeNvml
from neuraxis.cli import main
from neuron.engine.vllm.args import VllmOptions, engine_launch
from neuron.engineargs import print_engine_args

A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))
H100 = ("NVIDIA H100 80GB HBM3", (9, 0))


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    path = tmp_path / "qwen"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def printed(settings: NeuronSettings, nvml: Any | None) -> dict[str, Any]:
    out = io.StringIO()
    assert print_engine_args(settings, nvml, out) == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def test_the_configured_generation_is_printed_without_detection(model_dir: Path) -> None:
    nvml = FakeNvml([A100])
    settings = NeuronSettings(model=str(model_dir), generation=Generation.ADA, kv_cache_dtype="fp8")
    result = printed(settings, nvml)
    assert nvml.calls == []  # the host's Ampere GPU was never looked at
    expected = engine_launch(
        VllmOptions(served_id="qwen", model_path=model_dir, kv_cache_dtype="fp8"), Generation.ADA
    )
    assert result == {"generation": "ada", "engine_args": expected.kwargs, "env": expected.env}


def test_auto_prints_for_the_detected_generation(model_dir: Path) -> None:
    result = printed(NeuronSettings(model=str(model_dir)), FakeNvml([H100]))
    assert result["generation"] == "hopper"
    assert result["engine_args"]["enforce_eager"] is False


def test_auto_without_a_gpu_prints_for_the_cpu(model_dir: Path) -> None:
    result = printed(NeuronSettings(model=str(model_dir), kv_cache_gib=2), None)
    assert result["generation"] == "cpu"
    assert result["engine_args"]["enforce_eager"] is True
    assert result["env"]["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_a_bundled_model_is_located_not_prepared(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    settings = NeuronSettings(cache_dir=cache, generation=Generation.CPU)
    result = printed(settings, None)
    assert result["engine_args"]["model"] == str(cache / "models" / "smollm2-135m-instruct")
    assert result["engine_args"]["served_model_name"] == "smollm2-135m-instruct"
    assert not cache.exists()


def test_options_the_generation_lacks_are_refused_as_serve_refuses_them(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    settings = NeuronSettings(
        model=str(model_dir), generation=Generation.AMPERE, kv_cache_dtype="fp8"
    )
    assert print_engine_args(settings, None, out) == EXIT_WRONG_GPU
    assert out.getvalue() == ""
    assert "KV-cache dtype 'fp8' is not available on ampere" in capsys.readouterr().err


def test_the_sim_engine_has_no_engine_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert print_engine_args(NeuronSettings(engine="sim"), None, out) == 2
    assert out.getvalue() == ""
    assert "vllm engine" in capsys.readouterr().err


def test_the_command_line_flag_prints_and_exits(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["neuron", "serve", "--print-engine-args", "--generation", "blackwell"]
    argv += ["--model", str(model_dir), "--quantization", "nvfp4", "--tensor-parallel-size", "2"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["generation"] == "blackwell"
    assert result["engine_args"]["quantization"] == "nvfp4"
    assert result["engine_args"]["tensor_parallel_size"] == 2
    assert result["engine_args"]["dtype"] == "bfloat16"
