"""The Responses API through the real stack, judged by the pinned openai
client in strict mode: objects, the whole event sequence, tools across turns
through previous_response_id, the store (retrieve, input_items, delete,
store: false, a cortex restart). Background runs, cancels, truncation and
failures: test_responses_runs.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from pydantic import BaseModel

from harness.ports import free_port
from harness.postgres import postgres_server
from harness.procs import Proc, wait_http_ready
from harness.stacks import MODEL, Stack, strict_client
from harness.toolcalls import CITY_WEATHER
from tests.integration.responses import QUESTION, check_event_stack, cortex_args, stream_events


@pytest.fixture(scope="module")
def postgres_dsn() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture
def base(stack: Stack) -> str:
    """The session's cortex, its responses in SQLite. The same routes over
    PostgreSQL: the store contract holds both backends to one interface
    (tests/contract/cortex/store/test_contract.py), the routes speak only
    through it, and test_stored_chain_survives_a_cortex_restart[postgres]
    creates, retrieves and chains through a cortex on PostgreSQL."""
    return stack.base_url


def test_create(stack: Stack) -> None:
    response = stack.client().responses.create(model=MODEL, input=QUESTION, temperature=0)
    assert response.status == "completed" and response.object == "response"
    assert response.id.startswith("resp_")
    assert "Paris" in response.output_text
    usage = response.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens >= 0
    assert response.error is None and response.incomplete_details is None


def test_stream_event_stack(stack: Stack) -> None:
    events = stream_events(stack, input=QUESTION, temperature=0)
    streamed = check_event_stack(events)
    assert events[-1]["type"] == "response.completed"
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["usage"]["output_tokens"] > 0
    output_text = "".join(c["text"] for item in final["output"] for c in item.get("content", []))
    assert streamed == output_text and "Paris" in output_text


def test_sdk_stream_helper(stack: Stack) -> None:
    with stack.client().responses.stream(model=MODEL, input=QUESTION, temperature=0) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text and "Paris" in final.output_text


def test_incomplete_when_max_output_tokens_cut(stack: Stack) -> None:
    response = stack.client().responses.create(
        model=MODEL, input="Write a long story about a dragon.", max_output_tokens=5
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    events = stream_events(stack, input="Write a long story about a dragon.", max_output_tokens=5)
    check_event_stack(events)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_forced_tool_call_then_result_then_answer(base: str) -> None:
    client = strict_client(base)
    first = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[CITY_WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        temperature=0,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert "city" in json.loads(calls[0].arguments)
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[CITY_WEATHER],
        temperature=0,
        tool_choice="none",
        max_output_tokens=40,
        input=[
            {
                "type": "function_call_output",
                "call_id": calls[0].call_id,
                "output": "Sunny, 21 degrees",
            }
        ],
    )
    assert second.previous_response_id == first.id
    assert [item.type for item in second.output] == ["message"] and second.output_text


def test_function_call_events_when_streamed(stack: Stack) -> None:
    events = stream_events(
        stack,
        input="Weather in Rome?",
        tools=[CITY_WEATHER],
        temperature=0,
        tool_choice={"type": "function", "name": "get_weather"},
    )
    check_event_stack(events)
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    deltas = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert done["arguments"] == deltas and done["name"] == "get_weather"
    json.loads(deltas)
    assert not any(k.startswith("response.content_part") for k in kinds)


def test_three_turn_chain_sends_the_history(base: str) -> None:
    client = strict_client(base)
    turns = ["My name is Ada.", "I live in Paris.", "What is my name?"]
    previous = None
    input_tokens = []
    for turn in turns:
        response = client.responses.create(
            model=MODEL,
            input=turn,
            previous_response_id=previous,
            temperature=0,
            max_output_tokens=20,
        )
        input_tokens.append(response.usage.input_tokens)  # type: ignore[union-attr]
        previous = response.id
    assert input_tokens[0] < input_tokens[1] < input_tokens[2]


def _text_of(item: BaseModel) -> str:
    """The text of an input message item (a union type in the SDK)."""
    return str(item.model_dump()["content"][0]["text"])


def test_retrieve_input_items_delete(base: str) -> None:
    client = strict_client(base)
    items = [{"role": "user", "content": f"Line {i}"} for i in range(5)]
    created = client.responses.create(model=MODEL, input=items, max_output_tokens=5)  # type: ignore[arg-type]
    again = client.responses.retrieve(created.id)
    assert again.id == created.id and again.output_text == created.output_text
    page = client.responses.input_items.list(created.id, limit=2, order="asc")
    assert [_text_of(i) for i in page.data] == ["Line 0", "Line 1"]
    # first_id and last_id are on the wire but not in the SDK's page type.
    extra = page.model_extra or {}
    assert page.has_more and extra["first_id"] == page.data[0].id
    rest = client.responses.input_items.list(
        created.id, limit=10, order="asc", after=extra["last_id"]
    )
    assert [_text_of(i) for i in rest.data] == ["Line 2", "Line 3", "Line 4"]
    assert not rest.has_more
    newest = client.responses.input_items.list(created.id, limit=1)
    assert _text_of(newest.data[0]) == "Line 4"
    deleted = httpx.delete(f"{base}/v1/responses/{created.id}").json()
    assert deleted == {"id": created.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_store_false_is_not_retrievable(base: str) -> None:
    client = strict_client(base)
    response = client.responses.create(model=MODEL, input="Hi", store=False, max_output_tokens=5)
    assert response.model_dump()["store"] is False  # not in the SDK's Response type
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=MODEL, input="Hi", previous_response_id=response.id)
    assert info.value.param == "previous_response_id"


def test_unknown_previous_response_is_404(base: str) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        strict_client(base).responses.create(
            model=MODEL, input="Hi", previous_response_id="resp_nope"
        )
    assert info.value.param == "previous_response_id" and info.value.type == "invalid_request_error"


# The validation 400s of every parameter: tests/unit/cortex/api/test_bad_requests.py.


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_stored_chain_survives_a_cortex_restart(
    stack: Stack, logs_dir: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        store = ["--state-dir", str(logs_dir / "restart-state")]
    else:
        store = ["--postgres-dsn", str(request.getfixturevalue("postgres_dsn"))]
    port = free_port()
    args = cortex_args(stack, port, store)
    base = f"http://127.0.0.1:{port}"
    first_cortex = Proc(args, logs_dir / f"cortex-restart-{backend}-1.log")
    try:
        wait_http_ready(first_cortex, f"{base}/readyz", 60)
        first = strict_client(base).responses.create(
            model=MODEL, input="My name is Ada.", max_output_tokens=10, temperature=0
        )
    finally:
        first_cortex.stop()
    second_cortex = Proc(args, logs_dir / f"cortex-restart-{backend}-2.log")
    try:
        wait_http_ready(second_cortex, f"{base}/readyz", 60)
        client = strict_client(base)
        assert client.responses.retrieve(first.id).output_text == first.output_text
        second = client.responses.create(
            model=MODEL,
            input="What is my name?",
            previous_response_id=first.id,
            max_output_tokens=10,
            temperature=0,
        )
        assert second.usage.input_tokens > first.usage.input_tokens  # type: ignore[union-attr]
    finally:
        second_cortex.stop()
