"""The shared parameters of every generation API: one set of checks, one
builder of the internal request."""

from __future__ import annotations

import json

import pytest

from axon.errors import InvalidRequestError
from axon.priority import PriorityClass
from axon.protomaps import CLASS_TO_PB
from axon.v1 import neuron_pb2 as pb
from cortex.api import params
from cortex.schemas.chat import ChatCompletionRequest
from cortex.schemas.completions import CompletionRequest
from cortex.schemas.responses import ResponsesRequest, TextFormat


def _gen(**fields: object) -> params.Generation:
    return params.Generation(model="m", sampling=pb.SamplingParams(), **fields)  # type: ignore[arg-type]


def test_unsupported_field_is_named() -> None:
    body = CompletionRequest.model_validate(
        {"model": "m", "prompt": "x", "suffix": None, "logit_bias": {"1": 2}}
    )
    with pytest.raises(InvalidRequestError) as info:
        params.reject_unsupported(body)
    assert info.value.param == "logit_bias"


def test_false_or_null_asks_for_nothing() -> None:
    body = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "a"}], "audio": False}
    )
    params.reject_unsupported(body)
    assert body.unsupported == []


def test_unsupported_fields_are_named_in_order() -> None:
    body = ResponsesRequest.model_validate(
        {"model": "m", "input": "x", "prompt": {"id": "p"}, "conversation": "c"}
    )
    assert body.unsupported == ["conversation", "prompt"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream_options": True}, "stream_options"),
        ({"tool_mode": "auto"}, "tool_choice"),
        ({"named_tool": "g", "tools": [pb.Tool(name="f")]}, "tool_choice"),
    ],
)
def test_rules_across_fields(fields: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        params.check(_gen(**fields))
    assert info.value.param == param


def test_valid_combinations_pass() -> None:
    params.check(_gen(stream=True, stream_options=True))
    params.check(_gen(named_tool="f", tools=[pb.Tool(name="f")]))


def test_internal_request_for_a_conversation() -> None:
    shared = _gen(
        tools=[params.tool("f", None, {"type": "object"}, True)],
        named_tool="f",
        parallel_tool_calls=False,
        format=TextFormat.model_validate({"type": "json_schema", "schema": {"type": "object"}}),
        truncate_oldest=True,
    )
    messages = [pb.ChatMessage(role="user", content="hi")]
    req = params.internal_request(shared, "id-1", messages=messages)
    assert req.request_id == "id-1" and req.model == "m" and not req.HasField("prompt")
    assert req.tool_choice.mode == pb.TOOL_CHOICE_MODE_NAMED and req.tool_choice.name == "f"
    assert json.loads(req.tools[0].parameters_json) == {"type": "object"} and req.tools[0].strict
    assert req.HasField("parallel_tool_calls") and not req.parallel_tool_calls
    assert req.response_format.kind == pb.RESPONSE_FORMAT_KIND_JSON_SCHEMA
    assert json.loads(req.response_format.schema_json) == {"type": "object"}
    assert req.truncate_oldest


def test_internal_request_for_a_prompt_with_a_mode() -> None:
    req = params.internal_request(_gen(tool_mode="required"), "id-2", prompt="Once")
    assert req.prompt == "Once" and not req.messages
    assert req.tool_choice.mode == pb.TOOL_CHOICE_MODE_REQUIRED
    assert not req.HasField("parallel_tool_calls") and not req.HasField("response_format")


def test_sampling_of_the_shared_fields() -> None:
    body = CompletionRequest.model_validate(
        {
            "model": "m",
            "prompt": "p",
            "stop": "x",
            "temperature": 0.5,
            "top_k": 3,
            "seed": 7,
            "frequency_penalty": 1.0,
            "n": 2,
        }
    )
    sampling = params.sampling_of(body, max_tokens=9, logprobs=None)
    assert list(sampling.stop) == ["x"] and sampling.max_tokens == 9 and sampling.n == 2
    assert sampling.temperature == 0.5 and sampling.top_k == 3 and sampling.seed == 7
    assert not sampling.HasField("top_p") and not sampling.HasField("logprobs")


def test_sampling_of_vllms_extensions() -> None:
    body = CompletionRequest.model_validate(
        {
            "model": "m",
            "prompt": "p",
            "min_p": 0.1,
            "repetition_penalty": 1.2,
            "min_tokens": 4,
            "ignore_eos": True,
            "stop_token_ids": [2, 3],
            "include_stop_str_in_output": False,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": True,
            "allowed_token_ids": [5],
            "bad_words": ["x y"],
        }
    )
    s = params.sampling_of(body, max_tokens=None, logprobs=None)
    assert s.min_p == pytest.approx(0.1) and s.repetition_penalty == pytest.approx(1.2)
    assert s.min_tokens == 4 and s.ignore_eos is True
    assert list(s.stop_token_ids) == [2, 3] and list(s.allowed_token_ids) == [5]
    assert list(s.bad_words) == ["x y"]
    # A false flag is still sent: it is not the engine's default for every flag.
    assert s.HasField("include_stop_str_in_output") and not s.include_stop_str_in_output
    assert s.HasField("skip_special_tokens") and not s.skip_special_tokens
    assert s.spaces_between_special_tokens is True


def test_unset_extensions_stay_unset() -> None:
    body = CompletionRequest.model_validate({"model": "m", "prompt": "p"})
    s = params.sampling_of(body, max_tokens=None, logprobs=None)
    for name in ("min_p", "repetition_penalty", "min_tokens", "ignore_eos", "skip_special_tokens"):
        assert not s.HasField(name), name
    assert not s.stop_token_ids and not s.allowed_token_ids and not s.bad_words


@pytest.mark.parametrize(
    ("priority", "tier", "cls"),
    [
        (None, None, "default"),
        (-5, None, "interactive"),
        (0, "flex", "default"),  # priority wins
        (3, None, "batch"),
        ("batch", "priority", "batch"),
        (None, "priority", "interactive"),
        (None, "flex", "batch"),
        (None, "auto", "default"),
    ],
)
def test_the_requested_class(priority: int | str | None, tier: str | None, cls: str) -> None:
    assert params.requested_class(priority, tier) == cls


def test_each_api_carries_the_class_to_the_internal_request() -> None:
    chat = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "priority": -1}
    )
    completion = CompletionRequest.model_validate({"model": "m", "prompt": "x", "priority": 1})
    responses = ResponsesRequest.model_validate(
        {"model": "m", "input": "hi", "service_tier": "flex"}
    )
    asked: list[tuple[int | str | None, str | None, PriorityClass]] = [
        (chat.priority, chat.service_tier, "interactive"),
        (completion.priority, completion.service_tier, "batch"),
        (responses.priority, responses.service_tier, "batch"),
    ]
    for priority, tier, expected in asked:
        generation = params.Generation(
            model="m",
            sampling=pb.SamplingParams(),
            priority=params.requested_class(priority, tier),
        )
        request = params.internal_request(generation, "r")
        assert request.priority == CLASS_TO_PB[expected]
