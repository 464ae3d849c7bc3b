"""`neuraxis up --deployment FILE` and `--engine sim`: the spec `up` hands
its cortex, checked before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from axon.generations import Generation
from axon.neuron_settings import DEFAULT_CHAT_MODEL, DEFAULT_EMBEDDING_MODEL
from cortex.cluster.spec import SpecError, parse_spec
from harness.sim_specs import adapter_dir, lora_spec
from neuraxis.cli import build_parser
from neuraxis.embedded import EmbeddedOptions
from neuraxis.embedded_deployment import bundled_sources, up_spec
from neuraxis.options import overrides

SPEC = """
[[models]]
id = "chat"
source = "smollm2-135m-instruct"
min_generation = "ada"
tensor_parallel_size = 2
[models.autoscale]
min_replicas = 0
max_replicas = 3
scale_to_zero_after_s = 60

[[models]]
id = "fixed"
source = "/models/x"
replicas = 2
generations = ["cpu"]
"""


def _up(*argv: str) -> EmbeddedOptions:
    return EmbeddedOptions(**overrides(build_parser().parse_args(["up", *argv]), EmbeddedOptions))


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "deployment.toml"
    path.write_text(SPEC)
    return path


def test_a_deployment_file_runs_as_written(spec_file: Path) -> None:
    options = _up("--deployment", str(spec_file))
    text = up_spec(options)
    chat, fixed = parse_spec(text, "up").models
    assert chat.autoscale is not None
    assert (chat.autoscale.min_replicas, chat.autoscale.max_replicas) == (0, 3)
    assert chat.tensor_parallel_size == 2 and chat.engine.kind == "vllm"
    assert (fixed.replicas, fixed.source) == (2, "/models/x")
    assert bundled_sources(text, options) == ["smollm2-135m-instruct"]


def test_engine_sim_runs_the_same_spec_on_simulated_replicas_on_this_cpu(spec_file: Path) -> None:
    options = _up("--deployment", str(spec_file), "--engine", "sim", "--sim-ttft-s", "0.2")
    text = up_spec(options)
    chat, fixed = parse_spec(text, "up").models
    for model in (chat, fixed):
        assert model.engine.kind == "sim"
        assert model.engine.sim_ttft_s == 0.2
        assert model.allowed_generations() == [Generation.CPU]
        assert model.tensor_parallel_size == 1
    assert chat.autoscale is not None and chat.autoscale.scale_to_zero_after_s == 60
    assert chat.replicas == 0 and fixed.replicas == 2
    assert bundled_sources(text, options) == []  # nothing to prepare


def test_engine_sim_alone_runs_the_chat_model_on_replicas_of_the_sim_engine() -> None:
    options = _up("--engine", "sim", "--replicas", "3", "--auth", "required")
    [chat] = parse_spec(up_spec(options), "up").models
    assert (chat.id, chat.replicas, chat.engine.kind) == (DEFAULT_CHAT_MODEL, 3, "sim")
    assert options.auth == "required"


def test_the_default_is_vllm_with_the_bundled_models() -> None:
    options = _up()
    models = parse_spec(up_spec(options), "up").models
    assert [m.engine.kind for m in models] == ["vllm", "vllm"]
    assert bundled_sources(up_spec(options), options) == [
        DEFAULT_CHAT_MODEL,
        DEFAULT_EMBEDDING_MODEL,
    ]


def test_an_invalid_deployment_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(SPEC.replace("max_replicas = 3", "max_replicas = 0"))
    with pytest.raises(SpecError, match=r"bad.toml: line 9: models.0.autoscale.max_replicas"):
        up_spec(_up("--deployment", str(path)))


@pytest.mark.parametrize(
    "argv",
    [
        ["--static", "--engine", "sim"],
        ["--static", "--deployment", "d.toml"],
        ["--deployment", "d.toml", "--replicas", "2"],
    ],
)
def test_contradicting_options_are_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError, match="--"):
        _up(*argv)


def test_a_deployment_file_with_adapters_hands_them_to_cortex(tmp_path: Path) -> None:
    """The embedded default runs a spec's LoRA adapters (issue 28): the
    spec `up` gives cortex keeps the model's lora table and each adapter
    (their sources checked first: PEFT's adapter_config.json)."""
    support, legal = adapter_dir(tmp_path, "support"), adapter_dir(tmp_path, "legal")
    path = tmp_path / "deployment.toml"
    path.write_text(lora_spec(support, legal))
    (chat,) = parse_spec(up_spec(_up("--deployment", str(path))), "up").models
    assert chat.lora is not None
    assert (chat.lora.max_adapters_per_replica, chat.lora.max_rank) == (2, 16)
    assert [(a.id, a.source) for a in chat.adapters] == [
        ("support", str(support)),
        ("legal", str(legal)),
    ]
