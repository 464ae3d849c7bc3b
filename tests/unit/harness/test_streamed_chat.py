"""The one reader of streamed chat (harness/streamed_chat.py) against
scripted bodies: what a whole answer, a cut stream, a refusal and a broken
connection leave in the record, over the async and the sync client alike."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from harness.streamed_chat import CHAT_PATH, StreamedChat, hello_chat, read, read_sync

WHOLE = (
    'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}\n\n'
    'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n'
    "data: [DONE]\n\n"
)
CUT = (
    'data: {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\n'
    'data: {"error": {"message": "neuron lost", "type": "server_error", "code": "unavailable"}}\n\n'
    "data: [DONE]\n\n"
)


def _answer(status: int, body: str) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(status, content=body.encode()))


def _broken(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("refused", request=request)


Reader = Callable[[httpx.MockTransport], StreamedChat]


@pytest.fixture(params=["async", "sync"])
def reader(request: pytest.FixtureRequest) -> Reader:
    """One request through `read` or through `read_sync`, its record."""
    body = hello_chat("m", 2)

    async def via_async(transport: httpx.MockTransport) -> StreamedChat:
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return await read(client, CHAT_PATH, body)

    def via_sync(transport: httpx.MockTransport) -> StreamedChat:
        with httpx.Client(transport=transport, base_url="http://x") as client:
            return read_sync(client, CHAT_PATH, body)

    if request.param == "async":
        return lambda transport: asyncio.run(via_async(transport))
    return via_sync


def test_a_whole_answer(reader: Reader) -> None:
    seen = reader(_answer(200, WHOLE))
    assert seen.finished and seen.done and seen.first_token
    assert seen.status == 200 and seen.error is None and seen.error_event is None
    assert seen.answer == "Hello" and len(seen.gaps) == 1
    assert seen.completion_tokens == 2 and seen.finish == "stop"
    assert seen.events == 4  # [DONE] is not counted
    assert seen.ttft is not None and 0 <= seen.ttft <= seen.ended_at - seen.started_at
    seen.raise_if_cut()  # nothing to raise


def test_a_stream_cut_by_an_error_event(reader: Reader) -> None:
    seen = reader(_answer(200, CUT))
    assert not seen.finished and seen.done and seen.first_token
    assert seen.error == "neuron lost"
    assert seen.error_event is not None and seen.error_event["code"] == "unavailable"
    assert seen.completion_tokens == 0
    seen.raise_if_cut()  # an error event is the caller's to judge


def test_a_refusal_is_recorded_and_raised_on_demand(reader: Reader) -> None:
    seen = reader(_answer(503, '{"error": "overloaded"}'))
    assert seen.status == 503 and seen.error == '{"error": "overloaded"}'
    assert not seen.first_token and not seen.done and seen.ttft is None
    with pytest.raises(RuntimeError, match="HTTP 503"):
        seen.raise_if_cut()


def test_a_transport_error_is_recorded(reader: Reader) -> None:
    seen = reader(httpx.MockTransport(_broken))
    assert seen.status == 0 and seen.error == "ConnectError: refused"
    assert seen.ended_at >= seen.started_at
    with pytest.raises(RuntimeError, match="ConnectError"):
        seen.raise_if_cut()
