"""A streamed chat completion as the client saw it, and the one reader of
such a stream that the loads, the benchmarks and the failover tests share.

`StreamedChat` records, event by event, when each content delta came and
its text, the usage chunk, the last finish reason, whether the stream ended
with an error event and with [DONE]; a refusal (not 200) and a transport
error are recorded too, not raised: a load counts them, a benchmark that
wants whole answers raises them (`raise_if_cut`). `read` sends a request
and reads its stream over an async client, `read_sync` over a sync one (the
failover tests' threads).

What does not live here: the raw-socket load that counts frames without
parsing them (sse_load.py), and the Responses API's events (workload.py).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness import sse

CHAT_PATH = "/v1/chat/completions"


def hello_chat(model: str, max_tokens: int) -> dict[str, Any]:
    """The loads' request: one user message, "hello", streamed."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": True,
    }


def greedy_chat(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """One user message, streamed and answered greedily: the same answer (and
    length) every time, where sampling could end it early."""
    return {
        "model": model,
        "stream": True,
        "temperature": 0,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }


@dataclass
class StreamedChat:
    started_at: float  # time.monotonic() when the request was sent
    status: int = 0  # the HTTP status (0: none came)
    events: int = 0  # data events before [DONE]
    content_at: list[float] = field(default_factory=list)  # when each content delta came
    text: list[str] = field(default_factory=list)  # the content deltas
    usage: dict[str, Any] | None = None  # the usage chunk's
    finish: str | None = None  # the last finish reason
    error_event: dict[str, Any] | None = None  # the error event's error object
    done: bool = False  # the stream ended with [DONE]
    error: str | None = None  # the error event's message, the refusal's body, the transport error
    ended_at: float = 0.0

    @property
    def first_token(self) -> bool:
        return bool(self.content_at)

    @property
    def ttft(self) -> float | None:
        """Seconds from the request to the first content (None: none came)."""
        return self.content_at[0] - self.started_at if self.content_at else None

    @property
    def gaps(self) -> tuple[float, ...]:
        """Seconds between content deltas (one fewer than the deltas)."""
        return tuple(b - a for a, b in itertools.pairwise(self.content_at))

    @property
    def answer(self) -> str:
        return "".join(self.text)

    @property
    def finished(self) -> bool:
        """A finish reason, then [DONE], and no error event."""
        return self.done and self.finish is not None and self.error_event is None

    def take(self, data: str) -> bool:
        """One event's data; True at [DONE], the stream's end."""
        if data == sse.DONE:
            self.done = True
            return True
        chunk = json.loads(data)
        self.events += 1
        if "error" in chunk:
            self.error_event = chunk["error"]
            self.error = str(chunk["error"].get("message", ""))
            return False
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if content := choice["delta"].get("content"):
                self.content_at.append(time.monotonic())
                self.text.append(content)
            self.finish = choice.get("finish_reason") or self.finish
        return False

    @property
    def completion_tokens(self) -> int:
        """Tokens out, as the usage chunk counts them (0: no usage chunk)."""
        return int(self.usage["completion_tokens"]) if self.usage else 0

    def refused(self, body: bytes) -> None:
        self.error = body.decode(errors="replace")[:200]

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Around the request: a transport error is recorded, not raised,
        and the end is timed however it came."""
        try:
            yield
        except httpx.HTTPError as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.ended_at = time.monotonic()

    def raise_if_cut(self) -> None:
        """The refusal or the transport error as an exception; an error event
        is the caller's to judge."""
        if self.error is not None and self.error_event is None:
            raise RuntimeError(f"HTTP {self.status}: {self.error}")


async def read(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> StreamedChat:
    """POST `body` to `url` and read the stream to its end."""
    seen = StreamedChat(time.monotonic())
    with seen.recording():
        async with client.stream("POST", url, json=body) as response:
            seen.status = response.status_code
            if response.status_code != 200:
                seen.refused(await response.aread())
                return seen
            async for data in sse.adata(response.aiter_lines()):
                if seen.take(data):
                    break
    return seen


def read_sync(client: httpx.Client, url: str, body: dict[str, Any]) -> StreamedChat:
    """`read` over a sync client (the same steps; Python has no one loop for
    both kinds of client)."""
    seen = StreamedChat(time.monotonic())
    with seen.recording(), client.stream("POST", url, json=body) as response:
        seen.status = response.status_code
        if response.status_code != 200:
            seen.refused(response.read())
            return seen
        for data in sse.data(response.iter_lines()):
            if seen.take(data):
                break
    return seen
