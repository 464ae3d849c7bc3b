"""The vLLM engine refuses an adapter it could not load before vLLM is
touched (the engine need not even have started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from axon.adapters import AdapterSource
from axon.errors import InvalidRequestError
from neuron.engine.vllm.args import VllmOptions
from neuron.engine.vllm.engine import VllmEngine


def _engine() -> VllmEngine:
    return VllmEngine(
        VllmOptions(served_id="smollm2", model_path="/models/smollm2", max_loras=1, max_lora_rank=8)
    )


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (None, "has no adapter_config.json"),
        ({"r": 16, "base_model_name_or_path": "smollm2"}, "rank 16 is above max_rank 8"),
        ({"r": 8, "base_model_name_or_path": "org/other"}, "trained on 'org/other'"),
    ],
)
async def test_a_bad_source_is_refused_naming_why(
    tmp_path: Path, config: dict[str, object] | None, reason: str
) -> None:
    if config is not None:
        (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(InvalidRequestError) as refused:
        await _engine().load_adapter(AdapterSource("x", str(tmp_path)))
    assert reason in refused.value.message and refused.value.param == "source"
