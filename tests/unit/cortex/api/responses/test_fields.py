"""The response object's key set, held to the pinned openai SDK's `Response`
model: when the pin moves and the SDK gains a field, this fails until the
object carries it too."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from axon.v1 import neuron_pb2 as pb
from cortex.api.responses.builder import ResponseBuilder
from cortex.api.responses.events import ResponseLifecycle
from cortex.api.responses.fields import request_fields
from cortex.schemas.responses import ResponsesRequest

SDK_FIELDS = {field.alias or name for name, field in Response.model_fields.items()}
# Beyond the SDK: the Open Responses specification's sampling penalties, and
# `store` (which OpenAI's own answers carry although the SDK model does not).
EXTRA = {"frequency_penalty", "presence_penalty", "store"}


def _builder(**request: Any) -> ResponseBuilder:
    body = ResponsesRequest.model_validate({"model": "m", "input": "hi", **request})
    return ResponseBuilder("resp_1", 1, request_fields(body), clock=lambda: 7.0)


def _text(content: str, reason: int = 0) -> pb.GenerateResponse:
    delta = pb.ChoiceDelta(index=0, text=content, finish_reason=reason)  # type: ignore[arg-type]
    return pb.GenerateResponse(choices=[delta], usage=pb.Usage(prompt_tokens=1))


def _objects(builder: ResponseBuilder, end: str) -> list[dict[str, Any]]:
    """The response object at each lifecycle event of one run, ended by
    `end` ("finish" or "fail")."""
    events = builder.start() + builder.feed(_text("Hello"))
    events += builder.finish() if end == "finish" else builder.fail("server_error", "lost")
    return [e.response for e in events if isinstance(e, ResponseLifecycle)]


@pytest.mark.parametrize("end", ["finish", "fail"])
def test_every_object_carries_every_sdk_field(end: str) -> None:
    objects = _objects(_builder(), end)
    assert len(objects) == 3  # created, in_progress, completed or failed
    for obj in objects:
        assert set(obj) == SDK_FIELDS | EXTRA


def test_the_sdk_reads_a_completed_response_with_the_request_echoed() -> None:
    builder = _builder(
        prompt_cache_key="session-1",
        safety_identifier="hashed-user",
        user="u",
        service_tier="flex",
        max_tool_calls=3,
        top_logprobs=2,
        frequency_penalty=0.5,
    )
    *_, completed = _objects(builder, "finish")
    response = Response.model_validate(completed)
    assert response.status == "completed" and response.completed_at == 7
    assert response.prompt_cache_key == "session-1"
    assert response.safety_identifier == "hashed-user" and response.user == "u"
    assert response.service_tier == "default"  # the one tier served
    assert response.max_tool_calls == 3 and response.top_logprobs == 2
    assert completed["frequency_penalty"] == 0.5 and completed["presence_penalty"] is None
    assert response.output_text == "Hello"


def test_completed_at_is_null_until_completed() -> None:
    created, in_progress, failed = _objects(_builder(), "fail")
    assert [o["completed_at"] for o in (created, in_progress, failed)] == [None, None, None]


def test_client_metadata_is_kept_only_when_sent() -> None:
    *_, kept = _objects(_builder(client_metadata={"turn": "1"}), "finish")
    *_, plain = _objects(_builder(), "finish")
    assert kept["client_metadata"] == {"turn": "1"} and "client_metadata" not in plain
