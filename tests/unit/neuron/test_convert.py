"""proto → engine types for what the wire carries new: vLLM's sampling
extensions and tool kinds with their grammars."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from axon.errors import InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from neuron.convert import engine_request
from neuron.engine.base import Grammar, GrammarSyntax, Sampling, ToolKind


def test_sampling_extensions_reach_the_engine_request() -> None:
    sampling = pb.SamplingParams(
        min_p=0.1,
        repetition_penalty=1.3,
        min_tokens=2,
        ignore_eos=True,
        stop_token_ids=[5, 6],
        include_stop_str_in_output=False,
        skip_special_tokens=False,
        spaces_between_special_tokens=True,
        allowed_token_ids=[1],
        bad_words=["no"],
    )
    s = engine_request(pb.GenerateRequest(model="m", sampling=sampling)).sampling
    assert s.min_p == pytest.approx(0.1) and s.repetition_penalty == pytest.approx(1.3)
    assert (s.min_tokens, s.ignore_eos) == (2, True)
    assert s.stop_token_ids == (5, 6) and s.allowed_token_ids == (1,) and s.bad_words == ("no",)
    assert s.include_stop_str_in_output is False and s.skip_special_tokens is False
    assert s.spaces_between_special_tokens is True


def test_every_sampling_field_reaches_the_engine_under_its_name() -> None:
    # Each a value other than its default, the repeated ones as lists.
    values: dict[str, Any] = {
        "max_tokens": 7,
        "temperature": 0.5,
        "top_p": 0.25,
        "top_k": 3,
        "seed": 11,
        "stop": ["END"],
        "presence_penalty": 0.75,
        "frequency_penalty": -0.5,
        "n": 2,
        "logprobs": 4,
        "min_p": 0.125,
        "repetition_penalty": 1.5,
        "min_tokens": 2,
        "ignore_eos": True,
        "stop_token_ids": [5, 6],
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "allowed_token_ids": [1],
        "bad_words": ["no"],
    }
    assert sorted(values) == sorted(f.name for f in fields(Sampling))
    request = pb.GenerateRequest(model="m", sampling=pb.SamplingParams(**values))
    expected: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in values.items()
    }
    assert engine_request(request).sampling == Sampling(**expected)


def test_unset_extensions_are_the_engines_defaults() -> None:
    assert engine_request(pb.GenerateRequest(model="m")).sampling == Sampling()


def test_tool_kinds_and_grammars() -> None:
    request = pb.GenerateRequest(
        model="m",
        tools=[
            pb.Tool(name="f", parameters_json='{"type": "object"}'),
            pb.Tool(name="free", kind=pb.TOOL_KIND_CUSTOM),
            pb.Tool(
                name="digits",
                kind=pb.TOOL_KIND_CUSTOM,
                grammar="[0-9]+",
                grammar_syntax=pb.GRAMMAR_SYNTAX_REGEX,
            ),
        ],
    )
    f, free, digits = engine_request(request).tools
    assert f.kind is ToolKind.FUNCTION and f.grammar is None
    assert free.kind is ToolKind.CUSTOM and free.grammar is None
    assert digits.grammar == Grammar(GrammarSyntax.REGEX, "[0-9]+")


def test_a_grammar_without_syntax_is_refused() -> None:
    tool = pb.Tool(name="t", kind=pb.TOOL_KIND_CUSTOM, grammar="start: x")
    with pytest.raises(InvalidRequestError):
        engine_request(pb.GenerateRequest(model="m", tools=[tool]))
