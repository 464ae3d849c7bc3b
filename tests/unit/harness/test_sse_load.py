"""The raw HTTP/1.1 SSE client of harness/sse_load.py against a scripted
server: chunked bodies, frames split across chunks, keep-alive, timing."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import AsyncIterator

import pytest

from harness.sse_load import run_level

FRAMES = [
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"tok0"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":" tok1"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":" tok2"}}]}\n\n',
    b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n',
    b"data: [DONE]\n\n",
]
GAP_S = 0.02


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:  # keep-alive: one request after another on the connection
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.startswith(b"Content-Length")
        )
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        # The second content frame arrives in two pieces.
        writer.write(_chunk(FRAMES[0]) + _chunk(FRAMES[1]))
        await writer.drain()
        await asyncio.sleep(GAP_S)
        writer.write(_chunk(FRAMES[2][:10]))
        writer.write(_chunk(FRAMES[2][10:]))
        await writer.drain()
        await asyncio.sleep(GAP_S)
        writer.write(b"".join(_chunk(f) for f in FRAMES[3:]) + b"0\r\n\r\n")
        await writer.drain()


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield f"http://127.0.0.1:{port}"


async def test_counts_frames_and_times_content_gaps(server: str) -> None:
    level = await run_level(server, "m", streams=2, seconds=0.15, max_tokens=3)
    assert level.errors == 0
    assert level.requests >= 4  # requests back to back on each connection
    assert level.events == level.requests * len(FRAMES)
    # Two gaps a request: tok0 -> tok1 -> tok2 (the role chunk starts nothing).
    assert len(level.gaps) == 2 * level.requests
    # The server sleeps GAP_S between frames; one frame delayed on a busy
    # machine arrives late and the next one early, so a single gap may be
    # short (17.9 ms was seen): the typical one may not.
    assert statistics.median(level.gaps) >= GAP_S * 0.9


async def test_a_refusal_is_an_error() -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        level = await run_level(f"http://127.0.0.1:{port}", "m", 1, 0.05, 3)
    assert level.errors == 1
    assert level.requests == 0
