"""A model's `[models.lora]` and `[[models.adapters]]`: parsed, carried to
its replicas' settings, and refused with the line and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from axon.generations import Generation
from cortex.cluster.replica_settings import replica_settings, settings_env
from cortex.cluster.spec import SpecError, parse_spec
from harness.sim_specs import adapter_dir, lora_spec
from neuraxis.embedded_deployment import spec_toml


def test_adapters_parse_and_reach_the_replicas_settings(tmp_path: Path) -> None:
    a1, a2 = adapter_dir(tmp_path, "a1"), adapter_dir(tmp_path, "a2")
    spec = parse_spec(lora_spec(a1, a2), "d.toml")
    (chat,) = spec.models
    assert chat.lora is not None and chat.lora.max_adapters_per_replica == 2
    assert spec.adapters() == {"support": "chat", "legal": "chat"}
    settings = replica_settings(chat, Generation.CPU)
    assert (settings.max_adapters, settings.max_lora_rank) == (2, 16)
    assert settings.adapters == [f"support={a1}", f"legal={a2}"]
    env = settings_env(settings)
    assert json.loads(env["NEURAXIS_NEURON_ADAPTERS"]) == [f"support={a1}", f"legal={a2}"]


def test_the_spec_writes_back_as_it_reads(tmp_path: Path) -> None:
    spec = parse_spec(lora_spec(adapter_dir(tmp_path, "a1"), adapter_dir(tmp_path, "a2")), "d.toml")
    assert parse_spec(spec_toml(spec), "again") == spec


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing", "line 11: models.0.adapters.0: {a1} has no adapter_config.json"),
        ("rank", "line 14: models.0.adapters.1: {a2}: rank 32 is above max_rank 16"),
        ("base", "line 14: models.0.adapters.1: {a2} was trained on 'org/other-model', not on"),
    ],
)
def test_an_adapter_its_engine_could_not_load_is_refused(
    tmp_path: Path, case: str, expected: str
) -> None:
    a1 = tmp_path / "a1"
    if case != "missing":
        adapter_dir(tmp_path, "a1")
    a2 = adapter_dir(
        tmp_path,
        "a2",
        rank=32 if case == "rank" else 8,
        base="org/other-model" if case == "base" else "HuggingFaceTB/SmolLM2-135M-Instruct",
    )
    with pytest.raises(SpecError) as refused:
        parse_spec(lora_spec(a1, a2), "d.toml")
    assert expected.format(a1=a1, a2=a2) in str(refused.value)


def test_adapters_need_the_lora_table() -> None:
    text = """
[[models]]
id = "chat"
source = "m"
generations = ["cpu"]
[[models.adapters]]
id = "a"
source = "/a"
"""
    with pytest.raises(
        SpecError, match=r"line 6: models\.0\.adapters: adapters need a \[models\.lora\] table"
    ):
        parse_spec(text, "d.toml")


def test_an_adapter_id_is_unique_among_models_and_adapters(tmp_path: Path) -> None:
    a1 = adapter_dir(tmp_path, "a1")
    text = lora_spec(a1, a1).replace('id = "legal"', 'id = "chat"')
    with pytest.raises(SpecError, match="model id 'chat' appears twice"):
        parse_spec(text, "d.toml")


def test_sim_models_adapters_are_not_read() -> None:
    text = lora_spec("/nowhere/a1", "/nowhere/a2") + '[models.engine]\nkind = "sim"\n'
    assert parse_spec(text, "d.toml").adapters() == {"support": "chat", "legal": "chat"}
