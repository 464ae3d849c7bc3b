"""A request that sets no max_tokens (issue 31 point 3): the model's
default_max_tokens, or the context its prompt leaves if that is fewer, never
an error because of the default; one function (`check_context`) for every
engine, reported in Info so that cortex counts the same figure."""

from __future__ import annotations

import pytest

from axon.errors import ContextLengthExceededError
from axon.neuron_settings import DEFAULT_MAX_TOKENS, NeuronSettings
from axon.tasks import ModelTask
from axon.v1 import neuron_pb2 as pb
from neuron.convert import model_info
from neuron.engine.base import EngineRequest, Message, Sampling, ServedModel, check_context
from neuron.engine.sim import SimEngine, SimOptions


def _model(default_max_tokens: int, context: int = 1000) -> ServedModel:
    return ServedModel(
        id="m",
        max_context_length=context,
        task=ModelTask.GENERATE,
        created=0,
        default_max_tokens=default_max_tokens,
    )


def test_a_missing_max_tokens_gets_the_default() -> None:
    assert check_context(_model(100), prompt_tokens=10, max_tokens=None) == 100


def test_the_default_never_goes_past_the_context_the_prompt_leaves() -> None:
    assert check_context(_model(100), prompt_tokens=950, max_tokens=None) == 50
    assert check_context(_model(100), prompt_tokens=999, max_tokens=None) == 1


def test_a_default_of_zero_is_the_remaining_context() -> None:
    assert check_context(_model(0), prompt_tokens=10, max_tokens=None) == 990


def test_a_given_max_tokens_is_kept_whatever_the_default() -> None:
    assert check_context(_model(100), prompt_tokens=10, max_tokens=500) == 500
    with pytest.raises(ContextLengthExceededError, match="requested 1010 tokens"):
        check_context(_model(100), prompt_tokens=10, max_tokens=1000)


def test_a_prompt_that_fills_the_context_is_refused_as_before() -> None:
    with pytest.raises(ContextLengthExceededError, match="maximum context length is 1000"):
        check_context(_model(100), prompt_tokens=1000, max_tokens=None)


def test_the_setting_defaults_to_4096_and_takes_zero() -> None:
    assert NeuronSettings().default_max_tokens == DEFAULT_MAX_TOKENS == 4096
    assert NeuronSettings(default_max_tokens=0).default_max_tokens == 0
    with pytest.raises(ValueError, match="default_max_tokens"):
        NeuronSettings(default_max_tokens=-1)


def test_info_reports_the_default() -> None:
    assert model_info(_model(300)).default_max_tokens == 300
    assert pb.ModelInfo().default_max_tokens == 0  # an older neuron: the remaining context


async def _generated(engine: SimEngine, words: int, max_tokens: int | None = None) -> int:
    request = EngineRequest(
        request_id="r",
        model="m",
        messages=(Message("user", " ".join(["w"] * words)),),
        sampling=Sampling(max_tokens=max_tokens),
    )
    outputs = [out async for out in engine.generate(request)]
    usage = outputs[-1].usage
    assert usage is not None
    return usage.completion_tokens


def _sim(default_max_tokens: int, context: int = 1000) -> SimEngine:
    options = SimOptions(
        served_id="m",
        max_context_length=context,
        ttft_s=0,
        itl_s=0,
        default_tokens=16,
        default_max_tokens=default_max_tokens,
    )
    return SimEngine(options)


async def test_the_sim_engine_applies_the_same_default() -> None:
    # Its model ends an answer after 16 tokens unless the default or the
    # context ends it sooner; a given max_tokens is generated whole.
    assert await _generated(_sim(8), words=10) == 8
    assert await _generated(_sim(0), words=10) == 16
    assert await _generated(_sim(8), words=10, max_tokens=30) == 30


async def test_the_sim_engine_fits_a_missing_max_tokens_into_a_nearly_full_context() -> None:
    # 995 prompt tokens leave 5: before, the sim asked for its 16 and failed.
    assert await _generated(_sim(4096), words=995) == 5
