"""The hot path of a streamed chat or legacy completion: the chunk whose one
choice carries a piece of text and nothing else (no logprobs, no finish),
one a token.

Building a pydantic chunk and dumping it costs ~12 µs a token; writing the
same bytes from pieces encoded once per stream costs under 1 µs. The pieces
are cut from pydantic's own dump of a sample chunk, around its choice index
and its text, so the two cannot drift apart: a field added to the chunk
model shows up in the pieces. The text is encoded by `json`'s C string
encoder, which escapes what pydantic's does (quote, backslash, the control
characters) and leaves the rest as UTF-8 (tests/unit/cortex/api/
test_text_chunks.py holds the two equal).
"""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring

from pydantic import BaseModel

# What the sample chunk carries where a real one has its index and text:
# values nothing else in a dump holds but a model name made to (the client
# names the model): then a mark is found twice, and that stream's chunks are
# models.
_INDEX = 987654321
_TEXT = "\x00neuraxis text\x01"


class TextChunks:
    """A stream's text-only chunks, as the JSON bytes `model_dump_json`
    would write for the model `sample(index, text)` makes."""

    def __init__(self, sample: Callable[[int, str], BaseModel], exclude: set[str] | None) -> None:
        self._sample = sample
        self._pieces = _pieces(sample(_INDEX, _TEXT).model_dump_json(exclude=exclude))

    def chunk(self, index: int, text: str) -> bytes | BaseModel:
        """The chunk's JSON, encoded; the model itself when the sample could
        not be cut (the framing dumps it)."""
        if self._pieces is None:
            return self._sample(index, text)
        head, middle, tail = self._pieces
        return b"".join((head, str(index).encode(), middle, encode_basestring(text).encode(), tail))


def _pieces(dump: str) -> tuple[bytes, bytes, bytes] | None:
    """The sample's dump cut around its index and its text, in that order;
    None unless each appears exactly once."""
    text_mark, index_mark = encode_basestring(_TEXT), f":{_INDEX},"
    if dump.count(text_mark) != 1:
        return None
    before, _, tail = dump.partition(text_mark)
    if before.count(index_mark) != 1:
        return None
    head, _, middle = before.partition(index_mark)
    return (head + ":").encode(), ("," + middle).encode(), tail.encode()
