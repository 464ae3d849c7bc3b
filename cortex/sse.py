"""Server-sent-event framing, done only here at the HTTP edge.

Each frame is one bytes object, so that it is written in one flush."""

from __future__ import annotations

DONE = b"data: [DONE]\n\n"


def data_frame(payload: str) -> bytes:
    return b"data: " + payload.encode() + b"\n\n"
