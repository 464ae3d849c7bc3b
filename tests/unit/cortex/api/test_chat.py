"""cortex's chat edge with an in-memory pool: validation, translation to the
internal request, and the wire shape of answers and stream chunks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient

from axon.errors import InvalidRequestError, UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.api.chat import _Chunker, _chunks, to_generate_request
from cortex.routing.policy import RouteHints
from cortex.schemas.chat import ChatCompletionChunk, ChatCompletionRequest
from harness import sse
from tests.unit.cortex.api.fakes import Script, ScriptedPool
from tests.unit.cortex.api.fakes import client as client_for
from tests.unit.cortex.schemas import bodies


def _text(text: str) -> pb.GenerateResponse:
    return pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text=text)])


DONE = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, text="!", finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=3, completion_tokens=2, cached_prompt_tokens=1),
)
SCRIPT: Script = [_text("Hi"), DONE]


def _client(script: Script) -> tuple[TestClient, ScriptedPool]:
    return client_for(script)


@pytest.fixture
def client() -> Iterator[TestClient]:
    c, _ = _client(SCRIPT)
    with c:
        yield c


def test_translation_to_internal_request() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "Be kind."},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
            ],
            "max_completion_tokens": 7,
            "max_tokens": 99,
            "temperature": 0.5,
            "stop": "x",
            "seed": 3,
        }
    )
    req = to_generate_request(body, "id-1")
    assert req.request_id == "id-1" and req.model == "m"
    assert [(m.role, m.content) for m in req.messages] == [
        ("developer", "Be kind."),
        ("user", "ab"),
    ]
    assert req.sampling.max_tokens == 7  # max_completion_tokens wins
    assert req.sampling.temperature == 0.5 and list(req.sampling.stop) == ["x"]
    assert req.sampling.seed == 3
    assert not req.sampling.HasField("top_p")


def test_a_json_schema_format_reaches_the_internal_request_with_its_nested_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": schema},
            },
        }
    )
    req = to_generate_request(body, "id-3")
    assert req.response_format.kind == pb.RESPONSE_FORMAT_KIND_JSON_SCHEMA
    assert json.loads(req.response_format.schema_json) == schema


def test_unsupported_field_is_rejected_with_param() -> None:
    body = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "a"}], "logit_bias": {"1": 2}}
    )
    with pytest.raises(InvalidRequestError) as info:
        to_generate_request(body, "id")
    assert info.value.param == "logit_bias"


# starlette's TestClient speaks httpx2 (httpx's successor), not httpx.
def _chat(client: TestClient, **extra: object) -> httpx2.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **extra}
    return client.post("/v1/chat/completions", json=body)


def test_non_streamed_answer(client: TestClient) -> None:
    r = _chat(client)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert r.headers["x-request-id"] == body["id"]
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hi!", "refusal": None, "tool_calls": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert body["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 1},
    }


def _events(text: str) -> list[str]:
    return list(sse.data(text.splitlines()))


def test_stream_shape_with_usage(client: TestClient) -> None:
    r = _chat(client, stream=True, stream_options={"include_usage": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["delta"] if c["choices"] else None for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
        {"content": "!"},
        {},
        None,
    ]
    assert [c["choices"][0]["finish_reason"] if c["choices"] else "-" for c in chunks] == [
        None,
        None,
        None,
        "stop",
        "-",
    ]
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"]["total_tokens"] == 5


def test_stream_without_usage_has_no_usage_key(client: TestClient) -> None:
    r = _chat(client, stream=True)
    chunks = [json.loads(e) for e in _events(r.text)[:-1]]
    assert all("usage" not in c for c in chunks)


def test_error_before_first_token_gets_its_status() -> None:
    c, _ = _client([UnavailableError("busy", retry_after=3)])
    with c:
        r = _chat(c, stream=True)
    assert r.status_code == 503 and r.headers["retry-after"] == "3"
    assert r.json()["error"]["code"] == "service_unavailable"


def test_error_mid_stream_ends_with_error_chunk_then_done() -> None:
    c, _ = _client([_text("Hi"), UnavailableError("neuron lost")])
    with c:
        r = _chat(c, stream=True)
    events = _events(r.text)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["message"] == "neuron lost"


def test_reasoning_content_in_message_and_delta() -> None:
    script: Script = [
        pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, reasoning="Think.")]),
        _text("Hi"),
        DONE,
    ]
    c, _ = _client(script)
    with c:
        whole = _chat(c).json()["choices"][0]["message"]
        streamed = [json.loads(e) for e in _events(_chat(c, stream=True).text)[:-1]]
    assert whole["reasoning_content"] == "Think." and whole["content"] == "Hi!"
    assert streamed[1]["choices"][0]["delta"] == {"reasoning_content": "Think."}


def test_no_reasoning_content_key_for_models_that_do_not_reason(client: TestClient) -> None:
    assert "reasoning_content" not in _chat(client).json()["choices"][0]["message"]


def test_unsupported_field_over_http_is_a_400_naming_it(client: TestClient) -> None:
    r = _chat(client, logit_bias={"1": 2})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "logit_bias" and "not supported" in error["message"]
    typo = _chat(client, temprature=1)
    assert typo.status_code == 400 and typo.json()["error"]["param"] == "temprature"


def _calls(*calls: pb.ToolCallDelta, text: str = "") -> pb.GenerateResponse:
    return pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text=text, tool_calls=calls)])


# tool_choice auto as the neuron streams it: text, then each call's id and
# name as soon as the model has written the name, then argument fragments.
AUTO_CALLS: Script = [
    _text("Checking. "),
    _calls(pb.ToolCallDelta(index=0, id="call_a", name="get_weather", arguments='{"city":')),
    _calls(pb.ToolCallDelta(index=0, arguments=' "Rome"}')),
    _calls(pb.ToolCallDelta(index=1, id="call_b", name="get_time", arguments="{}")),
    pb.GenerateResponse(
        choices=[pb.ChoiceDelta(index=0, finish_reason=pb.FINISH_REASON_TOOL_CALLS)],
        usage=pb.Usage(prompt_tokens=3, completion_tokens=9),
    ),
]


def _call_delta(index: int, **fields: Any) -> dict[str, Any]:
    """A chunk's delta carrying one tool call's part."""
    return {"tool_calls": [{"index": index, **fields}]}


def _named(name: str) -> dict[str, str]:
    """A call's first part: its name, no arguments yet."""
    return {"name": name, "arguments": ""}


def test_streamed_tool_calls_come_as_deltas_in_the_order_the_neuron_sends_them() -> None:
    c, _ = _client(AUTO_CALLS)
    with c:
        chunks = [json.loads(e) for e in _events(_chat(c, stream=True).text)[:-1]]
    assert [(ch["choices"][0]["delta"], ch["choices"][0]["finish_reason"]) for ch in chunks] == [
        ({"role": "assistant", "content": ""}, None),
        ({"content": "Checking. "}, None),
        (_call_delta(0, id="call_a", type="function", function=_named("get_weather")), None),
        (_call_delta(0, function={"arguments": '{"city":'}), None),
        (_call_delta(0, function={"arguments": ' "Rome"}'}), None),
        (_call_delta(1, id="call_b", type="function", function=_named("get_time")), None),
        (_call_delta(1, function={"arguments": "{}"}), None),
        ({}, "tool_calls"),
    ]


def test_streamed_tool_calls_add_up_to_the_non_streamed_message() -> None:
    c, _ = _client(AUTO_CALLS)
    with c:
        message = _chat(c).json()["choices"][0]["message"]
    assert message["content"] == "Checking. "
    assert [
        (t["id"], t["function"]["name"], t["function"]["arguments"]) for t in message["tool_calls"]
    ] == [("call_a", "get_weather", '{"city": "Rome"}'), ("call_b", "get_time", "{}")]


def test_vllm_sampling_extensions_reach_the_internal_request() -> None:
    c, pool = _client(SCRIPT)
    with c:
        r = _chat(c, top_k=4, min_p=0.1, ignore_eos=True, min_tokens=2, stop_token_ids=[9])
    assert r.status_code == 200
    (sent,) = pool.requests
    s = sent.sampling
    assert s.top_k == 4 and s.min_p == pytest.approx(0.1) and s.ignore_eos is True
    assert s.min_tokens == 2 and list(s.stop_token_ids) == [9]


def test_unknown_arguments_and_beam_search_are_still_400(client: TestClient) -> None:
    unknown = _chat(client, not_a_sampling_param=1)
    assert unknown.status_code == 400
    assert unknown.json()["error"]["param"] == "not_a_sampling_param"
    beam = _chat(client, use_beam_search=True)
    assert beam.status_code == 400 and beam.json()["error"]["param"] == "use_beam_search"


def _call(name: str, arguments: str) -> pb.GenerateResponse:
    call = pb.ToolCallDelta(index=0, id="call_1", name=name, arguments=arguments)
    return pb.GenerateResponse(
        choices=[
            pb.ChoiceDelta(index=0, tool_calls=[call], finish_reason=pb.FINISH_REASON_TOOL_CALLS)
        ],
        usage=pb.Usage(prompt_tokens=3, completion_tokens=2),
    )


def test_a_custom_tool_call_comes_back_as_a_custom_call() -> None:
    c, pool = _client([_call("digits", json.dumps({"input": "42"}))])
    tools = [
        {"type": "function", "function": {"name": "f"}},
        {"type": "custom", "custom": {"name": "digits"}},
    ]
    with c:
        r = _chat(c, tools=tools)
    assert r.status_code == 200
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert call == {"id": "call_1", "type": "custom", "custom": {"name": "digits", "input": "42"}}
    (sent,) = pool.requests
    assert [(t.name, t.kind) for t in sent.tools] == [
        ("f", pb.TOOL_KIND_UNSPECIFIED),
        ("digits", pb.TOOL_KIND_CUSTOM),
    ]


def test_a_custom_call_in_history_is_the_function_call_the_model_was_offered() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": bodies.custom_call_history("digits", "7"),
            "tools": [{"type": "custom", "custom": {"name": "digits"}}],
        }
    )
    req = to_generate_request(body, "id-2")
    (call,) = req.messages[1].tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("c1", "digits", {"input": "7"})


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "function", "function": {"name": "bad name!"}}, "tools[0].function.name"),
        ({"type": "custom", "custom": {"name": "bad name!"}}, "tools[0].custom.name"),
        ({"type": "telepathy"}, "tools[0]"),
    ],
)
def test_a_bad_tool_is_a_400_naming_its_field(
    client: TestClient, tool: dict[str, object], param: str
) -> None:
    r = _chat(client, tools=[tool])
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_prompt_cache_key_goes_to_routing_not_to_the_model() -> None:
    c, pool = _client(SCRIPT)
    body = {"model": "m", "messages": [{"role": "user", "content": "a"}], "prompt_cache_key": "k"}
    with c:
        assert c.post("/v1/chat/completions", json=body).status_code == 200
    assert pool.hints == [RouteHints(previous_response_id=None, prompt_cache_key="k")]


async def _rest(*messages: pb.GenerateResponse) -> AsyncIterator[pb.GenerateResponse]:
    for message in messages:
        yield message


async def test_each_neuron_message_is_one_group_of_chunks() -> None:
    # Two choices advance in each message: their chunks are one group (one
    # write at the edge); the opening chunks ride with the first message and
    # the usage chunk with the last.
    def both(
        a: str, b: str, finish: pb.FinishReason = pb.FINISH_REASON_UNSPECIFIED
    ) -> list[pb.ChoiceDelta]:
        return [
            pb.ChoiceDelta(index=0, text=a, finish_reason=finish),
            pb.ChoiceDelta(index=1, text=b, finish_reason=finish),
        ]

    first = pb.GenerateResponse(choices=both("A", "B"))
    last = pb.GenerateResponse(
        choices=both("C", "D", pb.FINISH_REASON_STOP),
        usage=pb.Usage(prompt_tokens=3, completion_tokens=4),
    )
    chunker = _Chunker("chatcmpl-g", 1, "m", include_usage=True)
    groups = [
        [
            ChatCompletionChunk.model_validate_json(
                c if isinstance(c, bytes) else c.model_dump_json()
            )
            for c in g
        ]
        async for g in _chunks(first, _rest(last), chunker, 2, forced_tools=False)
    ]
    # The tokens' text-only chunks come encoded already (text_chunks.py).
    shapes = [
        [
            (c.choices[0].index, c.choices[0].delta, c.choices[0].finish_reason)
            if c.choices
            else "usage"
            for c in g
        ]
        for g in groups
    ]
    assert shapes == [
        [
            (0, {"role": "assistant", "content": ""}, None),
            (1, {"role": "assistant", "content": ""}, None),
            (0, {"content": "A"}, None),
            (1, {"content": "B"}, None),
        ],
        [
            (0, {"content": "C"}, None),
            (0, {}, "stop"),
            (1, {"content": "D"}, None),
            (1, {}, "stop"),
            "usage",
        ],
    ]
