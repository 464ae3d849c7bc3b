"""Bad requests through the HTTP edge, in-process: every API's validation
answers a 400 in the error envelope naming the parameter, before the pool
is asked (a scripted pool: chat model "m", embedding model "e").

These ran against the session's real stack (tests/integration/
test_chat_errors.py, test_openai_surface.py, test_responses.py), which
answers them from cortex alone; the envelope on the wire stays checked
there (malformed JSON, an SDK's BadRequestError, the unknown model)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from axon.v1 import neuron_pb2 as pb
from tests.unit.cortex.api.fakes import ScriptedPool
from tests.unit.cortex.api.fakes import client as client_for

MODEL, EMBEDDING_MODEL = "m", "e"
HELLO = [{"role": "user", "content": "hello"}]
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
DONE = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, text="ok", finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=1, completion_tokens=1),
)


@pytest.fixture(scope="module")
def app() -> Iterator[tuple[TestClient, ScriptedPool]]:
    client, pool = client_for([DONE])
    with client:
        yield client, pool


def _assert_400_naming(
    app: tuple[TestClient, ScriptedPool], path: str, body: dict[str, Any], param: str
) -> None:
    client, pool = app
    before = len(pool.requests)
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    assert set(r.json()) == {"error"}
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    assert len(pool.requests) == before


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL}, "messages"),
        ({"messages": HELLO}, "model"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"model": MODEL, "messages": HELLO, "max_tokens": 0}, "max_tokens"),
        ({"model": MODEL, "messages": HELLO, "top_p": 1.5}, "top_p"),
        ({"model": MODEL, "messages": HELLO, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        (
            {"model": MODEL, "messages": HELLO, "stream_options": {"include_usage": True}},
            "stream_options",
        ),
        ({"model": MODEL, "messages": HELLO, "tools": [{"type": "function"}]}, "tools[0].function"),
        ({"model": MODEL, "messages": HELLO, "n": 0}, "n"),
        ({"model": MODEL, "messages": HELLO, "logit_bias": {"1": 1}}, "logit_bias"),
        ({"model": MODEL, "messages": HELLO, "bogus_option": 1}, "bogus_option"),
        (
            {
                "model": MODEL,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
                    }
                ],
            },
            "messages[0].content",
        ),
    ],
)
def test_invalid_chat_parameters_are_400_with_param(
    app: tuple[TestClient, ScriptedPool], body: dict[str, Any], param: str
) -> None:
    # From tests/integration/test_chat_errors.py::test_invalid_parameters_are_400_with_param.
    _assert_400_naming(app, "/v1/chat/completions", body, param)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
        ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("/v1/chat/completions", {"tool_choice": "required"}, "tool_choice"),
        (
            "/v1/chat/completions",
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        ("/v1/chat/completions", {"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        (
            "/v1/chat/completions",
            {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
            "tools[0].function.name",
        ),
        ("/v1/chat/completions", {"response_format": {"type": "json_schema"}}, "response_format"),
        ("/v1/chat/completions", {"response_format": {"type": "yaml"}}, "response_format.type"),
        ("/v1/chat/completions", {"n": 17}, "n"),
        ("/v1/chat/completions", {"presence_penalty": 3}, "presence_penalty"),
        ("/v1/chat/completions", {"frequency_penalty": -3}, "frequency_penalty"),
        ("/v1/chat/completions", {"max_completion_tokens": 0}, "max_completion_tokens"),
        ("/v1/chat/completions", {"stop": 5}, "stop"),
        ("/v1/chat/completions", {"seed": "x"}, "seed"),
        ("/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, "messages[0]"),
        ("/v1/completions", {"suffix": "!"}, "suffix"),
        ("/v1/completions", {"logprobs": 6}, "logprobs"),
        ("/v1/completions", {"echo": True, "logprobs": 1}, "echo"),
        ("/v1/completions", {"best_of": 2}, "best_of"),
        ("/v1/completions", {"prompt": []}, "prompt"),
        ("/v1/embeddings", {"input": []}, "input"),
        ("/v1/embeddings", {"input": ""}, "input"),
        ("/v1/embeddings", {"input": "cat", "encoding_format": "int8"}, "encoding_format"),
        ("/v1/embeddings", {"input": "cat", "dimensions": 64}, "dimensions"),
    ],
)
def test_bad_parameters_are_400_naming_param(
    app: tuple[TestClient, ScriptedPool], path: str, body: dict[str, Any], param: str
) -> None:
    # From tests/integration/test_openai_surface.py::test_bad_parameters_are_400_naming_param.
    defaults: dict[str, dict[str, Any]] = {
        "/v1/chat/completions": {"model": MODEL, "messages": ASK},
        "/v1/completions": {"model": MODEL, "prompt": "Hi"},
        "/v1/embeddings": {"model": EMBEDDING_MODEL, "input": "cat"},
    }
    _assert_400_naming(app, path, {**defaults[path], **body}, param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        ({"background": True, "store": False}, "background"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"temperature": 3}, "temperature"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].message.content",
        ),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
        ({"prompt": {"id": "p"}}, "prompt"),
        ({"conversation": "conv_1", "previous_response_id": "resp_x"}, "conversation"),
        ({"input": 42}, "input"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}]},
            "input",
        ),
    ],
)
def test_bad_responses_input_is_400_naming_param(
    app: tuple[TestClient, ScriptedPool], body: dict[str, Any], param: str
) -> None:
    # From tests/integration/test_responses.py::test_bad_input_is_400_naming_param.
    _assert_400_naming(app, "/v1/responses", {"model": MODEL, "input": "Hi", **body}, param)
