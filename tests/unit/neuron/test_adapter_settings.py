"""The neuron's LoRA settings: adapters as ID=DIR, needing max_adapters, and
the engine built with them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from axon.generations import Generation
from axon.neuron_settings import NeuronSettings
from axon.tasks import ModelTask
from neuron.main import ResolvedModel, build_engine, check_adapters, vllm_options


def test_the_sim_engine_serves_the_settings_adapters() -> None:
    settings = NeuronSettings.model_validate(
        {"engine": "sim", "served_id": "m", "max_adapters": 2, "adapters": ["a=/x/a", "b=/x/b"]}
    )
    engine = build_engine(settings, Generation.CPU)
    assert [(m.id, m.parent) for m in engine.models()] == [("m", None), ("a", "m"), ("b", "m")]
    assert engine.max_adapters() == 2


def test_vllm_gets_max_loras_and_the_adapters() -> None:
    settings = NeuronSettings.model_validate(
        {"max_adapters": 1, "max_lora_rank": 8, "adapters": ["a=/x/a"]}
    )
    options = vllm_options(settings, ResolvedModel("/m", "m", ModelTask.GENERATE, None))
    assert (options.max_loras, options.max_lora_rank) == (1, 8)
    assert [a.spelled() for a in options.adapters] == ["a=/x/a"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"adapters": ["a=/x/a"]}, "adapters need max_adapters"),
        ({"max_adapters": 1, "adapters": ["/x/a"]}, "is not ID=DIR"),
    ],
)
def test_adapters_are_refused_when_they_cannot_be_served(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        NeuronSettings.model_validate(fields)


def test_a_neuron_with_an_adapter_vllm_could_not_load_stops_naming_it(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text('{"r": 32, "base_model_name_or_path": "m"}')
    settings = NeuronSettings.model_validate(
        {"max_adapters": 1, "max_lora_rank": 16, "adapters": [f"big={tmp_path}"]}
    )
    with pytest.raises(SystemExit, match=r"adapter 'big': .* rank 32 is above max_rank 16"):
        check_adapters(settings, ResolvedModel("/models/m", "m", ModelTask.GENERATE, None))
