"""A Responses request → the internal request: its own checks, the stored
chain, and the same GenerateRequest chat builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cortex.api.responses.items import normalise, parse_items
from cortex.api.responses.translate import generation_params, history, to_generate_request
from cortex.schemas.responses import ResponsesRequest
from cortex.store.base import StoredResponse
from cortex.store.sqlite import SqliteResponseStore
from neuraxis.core.errors import InvalidRequestError, NotFoundError
from neuraxis.core.v1 import neuron_pb2 as pb


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
        generation_params(_body(**fields))
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
    req = to_generate_request(generation_params(body), body.instructions, items, "resp_1")
    assert [(m.role, m.content) for m in req.messages] == [("system", "Be brief."), ("user", "Hi")]
    assert req.sampling.max_tokens == 5 and req.truncate_oldest
    assert req.tool_choice.mode == pb.TOOL_CHOICE_MODE_NAMED and req.tool_choice.name == "f"
    assert req.response_format.kind == pb.RESPONSE_FORMAT_KIND_JSON_OBJECT


def test_a_call_output_must_answer_an_earlier_call() -> None:
    body = _body(input=[{"type": "function_call_output", "call_id": "c1", "output": "4"}])
    items = parse_items([normalise(i) for i in body.items()])
    with pytest.raises(InvalidRequestError) as info:
        to_generate_request(generation_params(body), None, items, "resp_1")
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
