"""The wrapper that keeps vLLM's CPU engine alive on seeded requests
prefilled in chunks (neuron/engine/vllm/cpu_seed.py). That vLLM's runner is
wrapped for real, and the engine lives, is test_chat_real's seeded request
with a prompt of more than one prefill step."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from neuron.engine.vllm.cpu_seed import without_cpu_generators


def _runner(device: str, generators: dict[int, Any]) -> Any:
    return SimpleNamespace(
        device=torch.device(device), input_batch=SimpleNamespace(generators=generators)
    )


def _wind_back(runner: Any, discarded: list[int]) -> str:
    """What vLLM's bookkeeping does to the generators of the requests whose
    sampled token it throws away (a partial prefill)."""
    for i in discarded:
        gen = runner.input_batch.generators.get(i)
        if gen is not None:
            gen.set_offset(gen.get_offset() - 4)
    return "done"


def test_a_cpu_generator_cannot_be_wound_back() -> None:
    # The premise: vLLM's wind-back raises on a CPU generator.
    runner = _runner("cpu", {0: torch.Generator(device="cpu")})
    with pytest.raises(RuntimeError, match="does not use offset"):
        _wind_back(runner, [0])


def test_on_the_cpu_the_wind_back_sees_no_generator_and_they_come_back() -> None:
    generators = {0: torch.Generator(device="cpu").manual_seed(7)}
    runner = _runner("cpu", generators)
    assert without_cpu_generators(_wind_back)(runner, [0]) == "done"
    assert runner.input_batch.generators is generators


def test_the_generators_come_back_when_the_bookkeeping_raises() -> None:
    generators = {0: torch.Generator(device="cpu")}
    runner = _runner("cpu", generators)

    def broken(runner: Any) -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        without_cpu_generators(broken)(runner)
    assert runner.input_batch.generators is generators


def test_another_device_keeps_its_generators_in_sight() -> None:
    seen: list[dict[int, Any]] = []
    generators = {0: object()}
    runner = _runner("meta", generators)
    without_cpu_generators(lambda r: seen.append(r.input_batch.generators))(runner)
    assert seen == [generators]


def test_vllm_finds_the_plugin_and_it_does_nothing_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import entry_points

    from neuron.engine.vllm import cpu_seed

    (found,) = [
        e for e in entry_points(group="vllm.general_plugins") if e.name == "neuraxis_cpu_seed"
    ]
    assert found.load() is cpu_seed.plugin
    wrapped: list[bool] = []
    monkeypatch.setattr(cpu_seed, "keep_seeded_chunked_prefill_alive", lambda: wrapped.append(True))
    monkeypatch.delenv(cpu_seed.CPU_SEED_FIX_ENV, raising=False)
    cpu_seed.plugin()
    assert wrapped == []
    monkeypatch.setenv(cpu_seed.CPU_SEED_FIX_ENV, "1")
    cpu_seed.plugin()
    assert wrapped == [True]
