"""The one SSE reader of the tests and benchmarks: the data of each event
cortex streams, from the lines of a response body (httpx's `iter_lines` /
`aiter_lines`, or a whole body's text).

cortex frames each event as an optional `event: <type>` line, one
`data: <json>` line and a blank line; chat streams end with `data: [DONE]`.
`data` yields the data as text ([DONE] included: a reader that checks the
stream's end needs it), `objects` the parsed JSON objects ([DONE] left out).

A load generator that counts frames without parsing them is in sse_load.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

DONE = "[DONE]"
_PREFIX = "data: "


def data(lines: Iterable[str]) -> Iterator[str]:
    """Each event's data, in order."""
    for line in lines:
        if line.startswith(_PREFIX):
            yield line[len(_PREFIX) :]


def objects(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Each event's JSON object, in order; [DONE] is left out."""
    for text in data(lines):
        if text != DONE:
            yield json.loads(text)


def body_objects(body: str) -> list[dict[str, Any]]:
    """The JSON objects of a whole streamed body."""
    return list(objects(body.splitlines()))


async def adata(lines: AsyncIterable[str]) -> AsyncIterator[str]:
    """`data` over an async stream of lines."""
    async for line in lines:
        if line.startswith(_PREFIX):
            yield line[len(_PREFIX) :]


async def aobjects(lines: AsyncIterable[str]) -> AsyncIterator[dict[str, Any]]:
    """`objects` over an async stream of lines."""
    async for text in adata(lines):
        if text != DONE:
            yield json.loads(text)
