"""The stream wrapper at the edge: frames typed objects, and never ends a
stream without its terminal event, built from the error table."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

from axon.errors import ContextLengthExceededError, NeuraxisError
from cortex.http.sse import DONE, ChunkFraming, data_frame, event_frame, sse
from cortex.http.sse import Chunk as AnyChunk


class Chunk(BaseModel):
    text: str
    usage: int | None = None


async def _body(*items: AnyChunk | Exception | list[AnyChunk]) -> AsyncIterator[list[AnyChunk]]:
    """Each item a group of its own, unless it is a list (a group)."""
    for item in items:
        if isinstance(item, Exception):
            raise item
        yield item if isinstance(item, list) else [item]


async def _frames(body: AsyncIterator[list[AnyChunk]], framing: ChunkFraming) -> list[bytes]:
    return [frame async for frame in sse(body, framing, "req-42")]


def test_frames() -> None:
    assert data_frame('{"a":1}') == b'data: {"a":1}\n\n'
    assert event_frame("e.x", "{}") == b"event: e.x\ndata: {}\n\n"


async def test_chunks_then_done_with_excluded_keys() -> None:
    frames = await _frames(_body(Chunk(text="a"), Chunk(text="b")), ChunkFraming({"usage"}))
    assert frames == [b'data: {"text":"a"}\n\n', b'data: {"text":"b"}\n\n', DONE]


async def test_an_encoded_chunk_is_framed_as_it_is() -> None:
    """A token's text-only chunk comes encoded (cortex/api/text_chunks.py):
    framed with no model and no exclusion, in its group's one write."""
    body = _body([Chunk(text="a", usage=1), b'{"text":"b"}'])
    assert await _frames(body, ChunkFraming({"usage"})) == [
        b'data: {"text":"a"}\n\ndata: {"text":"b"}\n\n',
        DONE,
    ]


async def test_a_group_is_one_write_and_an_empty_group_none() -> None:
    body = _body([Chunk(text="a"), Chunk(text="b")], [], Chunk(text="c"))
    frames = await _frames(body, ChunkFraming({"usage"}))
    assert frames == [
        b'data: {"text":"a"}\n\ndata: {"text":"b"}\n\n',
        b'data: {"text":"c"}\n\n',
        DONE,
    ]


async def test_typed_error_mid_stream_ends_with_its_envelope_then_done() -> None:
    body = _body(Chunk(text="a"), ContextLengthExceededError("too long"))
    frames = await _frames(body, ChunkFraming())
    assert frames[-1] == DONE
    error = json.loads(frames[-2][len(b"data: ") :])["error"]
    assert error == {
        "message": "too long",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }


async def test_unexpected_error_is_logged_with_the_request_id_and_framed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="neuraxis.cortex"):
        frames = await _frames(_body(Chunk(text="a"), KeyError("boom")), ChunkFraming())
    error = json.loads(frames[-2][len(b"data: ") :])["error"]
    assert (error["type"], error["code"]) == ("server_error", "internal_error")
    assert "boom" not in error["message"]  # details stay in the log
    assert frames[-1] == DONE
    (record,) = [r for r in caplog.records if r.exc_info]
    assert getattr(record, "request_id", None) == "req-42"
    assert isinstance(record.exc_info[1], KeyError)  # type: ignore[index]


class _Broken(ChunkFraming):
    """A framing whose terminal objects cannot be made."""

    async def failed(self, error: NeuraxisError) -> list[AnyChunk]:
        raise RuntimeError("the store is gone")


async def test_a_failing_end_still_ends_with_a_terminal_frame(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="neuraxis.cortex"):
        frames = await _frames(_body(RuntimeError("first")), _Broken())
    assert json.loads(frames[-2][len(b"data: ") :])["error"]["code"] == "internal_error"
    assert frames[-1] == DONE
    logged = [r for r in caplog.records if r.exc_info]
    assert [type(r.exc_info[1]) for r in logged] == [RuntimeError, RuntimeError]  # type: ignore[index]
    assert all(getattr(r, "request_id", None) == "req-42" for r in logged)


class _Ending(ChunkFraming):
    async def completed(self) -> list[AnyChunk]:
        return [Chunk(text="end")]


async def test_completed_objects_follow_a_normal_body() -> None:
    frames = await _frames(_body(Chunk(text="a")), _Ending({"usage"}))
    assert frames == [b'data: {"text":"a"}\n\n', b'data: {"text":"end"}\n\n', DONE]


class _LongEnding(ChunkFraming):
    async def completed(self) -> list[AnyChunk]:
        return [Chunk(text="x"), Chunk(text="y")]


async def test_the_ending_is_one_write() -> None:
    frames = await _frames(_body(Chunk(text="a")), _LongEnding({"usage"}))
    assert frames == [
        b'data: {"text":"a"}\n\n',
        b'data: {"text":"x"}\n\ndata: {"text":"y"}\n\n',
        DONE,
    ]
