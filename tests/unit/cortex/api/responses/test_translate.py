"""A Responses request → the internal request: its own checks, the stored
chain, and the same GenerateRequest chat builds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from axon.errors import InvalidRequestError, NotFoundError
from axon.v1 import neuron_pb2 as pb
from cortex.api.responses.items import normalise, parse_items
from cortex.api.responses.translate import generation_params, history, to_generate_request
from cortex.recording import NoRecorder
from cortex.schemas.responses import ResponsesRequest
from cortex.store.base import StoredResponse
from cortex.store.sqlite import SqliteResponseStore


def _body(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "Hi", **fields})


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": {"id": "p"}}, "prompt"),
        ({"background": True, "store": False}, "background"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        (
            {
                "tools": [{"type": "function", "name": "f"}],
                "tool_choice": {"type": "function", "name": "g"},
            },
            "tool_choice",
        ),
    ],
)
def test_checks_name_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        generation_params(_body(**fields), NoRecorder())
    assert info.value.param == param


def test_request_becomes_the_internal_request() -> None:
    body = _body(
        instructions="Be brief.",
        max_output_tokens=5,
        temperature=0.2,
        truncation="auto",
        tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        tool_choice={"type": "function", "name": "f"},
        text={"format": {"type": "json_object"}},
    )
    items = parse_items([normalise(i) for i in body.items()])
    req = to_generate_request(
        generation_params(body, NoRecorder()), body.instructions, items, "resp_1"
    )
    assert [(m.role, m.content) for m in req.messages] == [("system", "Be brief."), ("user", "Hi")]
    assert req.sampling.max_tokens == 5 and req.truncate_oldest
    assert req.tool_choice.mode == pb.TOOL_CHOICE_MODE_NAMED and req.tool_choice.name == "f"
    assert req.response_format.kind == pb.RESPONSE_FORMAT_KIND_JSON_OBJECT


def test_a_call_output_must_answer_an_earlier_call() -> None:
    body = _body(input=[{"type": "function_call_output", "call_id": "c1", "output": "4"}])
    items = parse_items([normalise(i) for i in body.items()])
    with pytest.raises(InvalidRequestError) as info:
        to_generate_request(generation_params(body, NoRecorder()), None, items, "resp_1")
    assert info.value.param == "input"


async def test_history_walks_the_chain_oldest_first(tmp_path: Path) -> None:
    store = SqliteResponseStore(tmp_path / "r.sqlite3")
    try:

        def record(rid: str, previous: str | None, said: str, answer: str) -> StoredResponse:
            user = normalise(parse_items([{"type": "message", "role": "user", "content": said}])[0])
            output = {
                "id": f"msg_{rid}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": answer, "annotations": []}],
            }
            reasoning = {"id": f"rs_{rid}", "type": "reasoning", "summary": []}
            response = {"id": rid, "output": [reasoning, output]}
            return StoredResponse(rid, 1, previous, response, [user])

        await store.put(record("r1", None, "Hi", "Hello"))
        await store.put(record("r2", "r1", "Name?", "Ann"))
        items = await history(store, "r2")
        assert [(i.type, i.text()) for i in items if i.type == "message"] == [
            ("message", "Hi"),
            ("message", "Hello"),
            ("message", "Name?"),
            ("message", "Ann"),
        ]
        assert all(i.type != "reasoning" for i in items)
        with pytest.raises(NotFoundError):
            await history(store, "nope")
    finally:
        await store.close()


def test_codex_shaped_tools_become_the_offered_tools() -> None:
    body = _body(
        tools=[
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "Sub-agents.",
                "tools": [{"type": "function", "name": "close_agent", "parameters": {}}],
            },
            {"type": "custom", "name": "apply_patch"},
            {"type": "web_search", "external_web_access": False},
        ],
        tool_choice="auto",
    )
    req = to_generate_request(generation_params(body, NoRecorder()), None, body.items(), "resp_1")
    assert [(t.name, t.kind) for t in req.tools] == [
        ("exec_command", pb.TOOL_KIND_UNSPECIFIED),
        ("multi_agent_v1.close_agent", pb.TOOL_KIND_UNSPECIFIED),
        ("apply_patch", pb.TOOL_KIND_CUSTOM),
    ]
    assert req.tool_choice.mode == pb.TOOL_CHOICE_MODE_AUTO


def test_only_hosted_tools_with_auto_is_a_request_without_tools() -> None:
    body = _body(tools=[{"type": "web_search"}], tool_choice="auto")
    req = to_generate_request(generation_params(body, NoRecorder()), None, body.items(), "resp_1")
    assert not req.tools and req.tool_choice.mode == pb.TOOL_CHOICE_MODE_UNSPECIFIED


def test_a_forced_hosted_tool_is_refused_by_name() -> None:
    body = _body(tools=[{"type": "web_search"}], tool_choice={"type": "web_search_preview"})
    with pytest.raises(InvalidRequestError) as e:
        generation_params(body, NoRecorder())
    assert "web_search_preview" in e.value.message and e.value.param == "tool_choice"


def test_custom_and_namespaced_calls_route_back_into_the_conversation() -> None:
    body = _body(
        input=[
            {"role": "user", "content": "Fix it"},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "namespace": "crm",
             "arguments": "{}"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch",
             "input": "*** Begin Patch"},
            {"type": "function_call_output", "call_id": "c1", "output": "found"},
            {"type": "custom_tool_call_output", "call_id": "c2",
             "output": [{"type": "input_text", "text": "Done!"}]},
        ]
    )  # fmt: skip
    req = to_generate_request(generation_params(body, NoRecorder()), None, body.items(), "resp_1")
    _, assistant, out1, out2 = req.messages
    lookup, patch = assistant.tool_calls
    assert (lookup.name, lookup.arguments) == ("crm.lookup", "{}")
    assert (patch.name, json.loads(patch.arguments)) == (
        "apply_patch",
        {"input": "*** Begin Patch"},
    )
    assert [(m.role, m.tool_call_id, m.content) for m in (out1, out2)] == [
        ("tool", "c1", "found"),
        ("tool", "c2", "Done!"),
    ]


def test_a_custom_call_output_must_answer_an_earlier_call() -> None:
    body = _body(input=[{"type": "custom_tool_call_output", "call_id": "nope", "output": "x"}])
    with pytest.raises(InvalidRequestError):
        to_generate_request(generation_params(body, NoRecorder()), None, body.items(), "resp_1")


def test_stored_custom_calls_keep_their_ids() -> None:
    (item,) = parse_items([{"type": "custom_tool_call", "call_id": "c", "name": "t", "input": "x"}])
    assert normalise(item)["id"].startswith("ctc_")


def test_the_sampling_fields_reach_the_sampling() -> None:
    body = _body(temperature=0.25, top_p=0.5, frequency_penalty=0.5, presence_penalty=-1)
    sampling = generation_params(body, NoRecorder()).sampling
    assert sampling.temperature == 0.25 and sampling.top_p == 0.5
    assert sampling.frequency_penalty == 0.5 and sampling.presence_penalty == -1
    assert not generation_params(_body(), NoRecorder()).sampling.HasField("temperature")


@pytest.mark.parametrize(
    ("fields", "logprobs"),
    [
        ({"include": ["message.output_text.logprobs"], "top_logprobs": 3}, 3),
        ({"include": ["message.output_text.logprobs"]}, 0),
        ({"top_logprobs": 3}, None),  # not asked for in `include`
        ({"include": ["reasoning.encrypted_content"]}, None),
    ],
)
def test_logprobs_are_asked_of_the_neuron_when_included(
    fields: dict[str, Any], logprobs: int | None
) -> None:
    sampling = generation_params(_body(**fields), NoRecorder()).sampling
    assert (sampling.logprobs if sampling.HasField("logprobs") else None) == logprobs
