"""A load generator light enough not to be the bottleneck on 2 cores: raw
asyncio HTTP/1.1 over keep-alive connections, reading SSE frames out of the
chunked body and timing them, with no JSON parsing and no HTTP library.

Each of `streams` connections sends streamed chat requests back to back
until the deadline; for every request it records the gaps between the
frames that carry content (the first content frame starts the clock, so
time to first token is not a gap). The caller compares gaps against the
engine's own inter-token time to get what the gateway added.

What does not live here: starting the stack, deciding the levels and
reporting (gateway_capacity.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import grpc

from axon.v1 import neuron_pb2 as pb
from harness.procs import neuron_stub
from harness.ratios import ratio
from harness.streamed_chat import CHAT_PATH, hello_chat

CONTENT = b'"content":"'
EMPTY = b'"content":""'


@dataclass
class Level:
    """What the client saw at one concurrency."""

    streams: int
    gaps: list[float] = field(default_factory=list)  # seconds between content frames
    events: int = 0  # SSE frames of every kind
    requests: int = 0
    errors: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0  # this process's CPU time over the level

    def content(self, now: float, last: float | None) -> float:
        """A content frame came at `now`, the one before it at `last` (None:
        it is the first); returns `now`, the next one's `last`."""
        if last is not None:
            self.gaps.append(now - last)
        return now

    @property
    def events_per_s(self) -> float:
        return ratio(self.events, self.wall_s)

    @property
    def client_cpu(self) -> float:
        """The client's CPU use over the level, in cores (1.0: one core busy)."""
        return ratio(self.client_cpu_s, self.wall_s)


def _request(host: str, model: str, max_tokens: int) -> bytes:
    body = json.dumps(hello_chat(model, max_tokens)).encode()
    head = (
        f"POST {CHAT_PATH} HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _one(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, level: Level
) -> None:
    writer.write(request)
    status = await reader.readline()
    if b" 200 " not in status:
        raise ConnectionError(f"cortex answered {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass  # headers: the body is chunked
    pending = b""
    last: float | None = None
    while True:
        size = int((await reader.readline()).strip(), 16)
        if size == 0:
            await reader.readline()
            break
        data = await reader.readexactly(size + 2)
        now = time.perf_counter()
        pending += data[:-2]
        *frames, pending = pending.split(b"\n\n")
        for frame in frames:
            level.events += 1
            if CONTENT in frame and EMPTY not in frame:  # not the role chunk
                last = level.content(now, last)
    level.requests += 1


async def run_level(
    base_url: str, model: str, streams: int, seconds: float, max_tokens: int
) -> Level:
    """`streams` connections sending back to back for `seconds`."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    request = _request(f"{host}:{port}", model, max_tokens)
    level = Level(streams)
    deadline = time.perf_counter() + seconds

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < deadline:
                await _one(reader, writer, request, level)
        finally:
            writer.close()

    await _measure(level, [connection() for _ in range(streams)])
    return level


async def run_direct(
    address: str, model: str, streams: int, seconds: float, max_tokens: int
) -> Level:
    """The same load straight to one neuron over gRPC, without cortex: the
    floor of what the farm and a busy machine add to the gaps on their own."""
    level = Level(streams)
    deadline = time.perf_counter() + seconds
    request = pb.GenerateRequest(
        request_id="bench-direct",
        model=model,
        messages=[pb.ChatMessage(role="user", content="hello")],
        sampling=pb.SamplingParams(max_tokens=max_tokens),
    )
    async with grpc.aio.insecure_channel(address) as channel:
        stub = neuron_stub(channel)

        async def stream() -> None:
            while time.perf_counter() < deadline:
                last: float | None = None
                async for response in stub.Generate(request, timeout=60):
                    now = time.perf_counter()
                    level.events += 1
                    if any(c.text for c in response.choices):
                        last = level.content(now, last)
                level.requests += 1

        await _measure(level, [stream() for _ in range(streams)])
    return level


async def _measure(level: Level, streams: list[Coroutine[Any, Any, None]]) -> None:
    """Run the streams to their end, timing them (wall and this process's
    CPU) and counting the ones that failed."""
    cpu, started = time.process_time(), time.perf_counter()
    outcomes = await asyncio.gather(*streams, return_exceptions=True)
    level.wall_s = time.perf_counter() - started
    level.client_cpu_s = time.process_time() - cpu
    level.errors += sum(isinstance(o, BaseException) for o in outcomes)
