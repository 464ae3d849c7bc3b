"""A non-streamed answer on the wire: its JSON, built and encoded in a
worker thread when it is large, and encoded in pieces.

A chat answer with n = 16, 4,096 tokens each and 20 top logprobs holds 1.4
million log-probability objects (70 MiB of JSON); built and encoded on the
event loop it stalled cortex for 36 s, every other request and the health
checks with it. In a worker thread, building the objects is Python code,
which hands the GIL back to the loop every few milliseconds; encoding the
whole answer in one call is not (pydantic's encoder keeps the GIL for as
long as it runs: about a second for that answer), and neither is a full
garbage collection, which with millions of live objects takes a second too.
So `encode` writes what `model_dump_json` would, but no single call encodes
more than `SLICE` items of a list, and a long list of small objects can be
left `Deferred`: kept as its source items and converted `SLICE` at a time,
so that only a slice of its objects is ever alive. The caps bound the size
itself (`max_output_entries`, cortex/api/caps.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json
from starlette.responses import Response

from cortex.api import gc_paused

# List items encoded in one call (a chat logprob entry with 20 alternatives:
# ~21 objects; 256 of them encode in a few milliseconds).
SLICE = 256
# Below this many tokens and alternatives an answer is built and encoded on
# the loop: a thread costs more than the work.
IN_THREAD_ENTRIES = 8192

# One large answer built at a time: each thread that wants the GIL makes the
# loop's thread wait longer for its turns (/healthz p99 40 ms beside two
# builds at once).
_BUILDING = asyncio.Semaphore(1)


@dataclass(frozen=True)
class Deferred:
    """A list field's value left as its source `items`, which `encode`
    converts (`convert`) and writes `SLICE` at a time. Put in a model with
    `model_construct` (it is not the field's type): such a model is for
    `encode` only."""

    items: Sequence[Any]
    convert: Callable[[Sequence[Any]], list[Any]]


def deferred(items: Sequence[Any], convert: Callable[[Sequence[Any]], list[Any]]) -> Any:
    """A `Deferred`, typed as the list field it stands in for."""
    return Deferred(items, convert)


def entries(tokens: int, top_logprobs: int | None) -> int:
    """How many tokens and alternatives an answer of `tokens` tokens holds."""
    return tokens * (1 + (top_logprobs or 0))


async def json_answer(
    build: Callable[[], BaseModel | Mapping[str, Any]], size: int, headers: Mapping[str, str]
) -> Response:
    """The answer `build` makes, as a JSON response; `size`: its `entries`."""
    if size <= IN_THREAD_ENTRIES:
        body = encode(build())
    else:
        async with _BUILDING:
            body = await asyncio.to_thread(_built_and_encoded, build)
    return Response(body, media_type="application/json", headers=dict(headers))


def _built_and_encoded(build: Callable[[], BaseModel | Mapping[str, Any]]) -> bytes:
    """(A worker thread.) With the collector paused (gc_paused.py)."""
    with gc_paused.paused():
        return encode(build())


def encode(value: BaseModel | Mapping[str, Any]) -> bytes:
    """`value.model_dump_json()` (a mapping: as JSON), written in pieces."""
    out: list[bytes] = []
    _write(value, out)
    return b"".join(out)


def _write(value: Any, out: list[bytes]) -> None:
    if isinstance(value, BaseModel):
        out.append(b"{")
        written = 0
        for name, field in type(value).model_fields.items():
            item = getattr(value, name)
            if field.exclude or (field.exclude_if is not None and field.exclude_if(item)):
                continue
            out.append(b"," if written else b"")
            out.append(to_json(name) + b":")
            _write(item, out)
            written += 1
        out.append(b"}")
    elif isinstance(value, Mapping):
        out.append(b"{")
        for i, (key, item) in enumerate(value.items()):
            out.append(b"," if i else b"")
            out.append(to_json(str(key)) + b":")
            _write(item, out)
        out.append(b"}")
    elif isinstance(value, Deferred):
        out.append(b"[")
        for start in range(0, len(value.items), SLICE):
            piece = value.convert(value.items[start : start + SLICE])
            out.append(b"," if start else b"")
            out.append(to_json(piece, inf_nan_mode="null")[1:-1])
        out.append(b"]")
    elif isinstance(value, list) and len(value) > SLICE:
        out.append(b"[")
        for start in range(0, len(value), SLICE):
            out.append(b"," if start else b"")
            out.append(to_json(value[start : start + SLICE], inf_nan_mode="null")[1:-1])
        out.append(b"]")
    elif isinstance(value, list) and any(isinstance(item, BaseModel) for item in value):
        out.append(b"[")  # a few big items (choices): each in pieces
        for i, item in enumerate(value):
            out.append(b"," if i else b"")
            _write(item, out)
        out.append(b"]")
    else:
        out.append(to_json(value, inf_nan_mode="null"))  # as model_dump_json writes them
