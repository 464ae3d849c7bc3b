"""The engine starts vLLM with exactly what `--print-engine-args` prints:
engine_launch's keywords and environment. vLLM's AsyncLLM is replaced by a
recorder (no model is loaded); AsyncEngineArgs is vLLM's own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from axon.generations import Generation
from neuron.engine.vllm.args import VllmOptions, engine_launch
from neuron.engine.vllm.cpu_seed import CPU_SEED_FIX_ENV
from neuron.engine.vllm.engine import VllmEngine


class _StartedLLM:
    model_config = type("ModelConfig", (), {"max_model_len": 2048, "is_matryoshka": False})()
    errored = False

    def get_tokenizer(self) -> object:
        return object()


@pytest.mark.parametrize("generation", [Generation.CPU, Generation.ADA])
async def test_start_uses_the_printed_arguments(
    generation: Generation, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    started: list[Any] = []

    def from_engine_args(args: Any, **kwargs: Any) -> _StartedLLM:
        started.append(args)
        return _StartedLLM()

    monkeypatch.setattr(AsyncLLM, "from_engine_args", from_engine_args)
    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CONFIGURE_LOGGING", CPU_SEED_FIX_ENV):
        # Set first so that monkeypatch restores what was there after the test.
        monkeypatch.setenv(name, "unset")
        monkeypatch.delenv(name)
    options = VllmOptions(served_id="qwen", model_path=Path("/models/qwen"), kv_cache_gib=4)
    engine = VllmEngine(options, generation)
    await engine.start()

    expected = engine_launch(options, generation)
    assert started == [AsyncEngineArgs(**expected.kwargs)]
    assert {name: os.environ.get(name) for name in expected.env} == expected.env
    if generation is Generation.CPU:
        assert started[0].enforce_eager is True
    else:
        assert started[0].enforce_eager is False
        assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ
