"""A token's text-only chunk written from pieces (cortex/api/text_chunks.py)
is byte for byte what pydantic writes for the chunk model, for chat and
legacy completions, with and without the usage key, for any text."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from cortex.api.text_chunks import _TEXT, TextChunks
from cortex.http.sse import chunk_exclusions
from cortex.schemas.chat import ChatCompletionChunk, ChunkChoice
from cortex.schemas.completions import Completion, CompletionChoice

Sample = Callable[[int, str], BaseModel]

# Every character JSON must escape, and some it must not (DEL, the line and
# paragraph separators that JavaScript once disallowed, a non-BMP emoji).
AWKWARD = "".join(map(chr, range(0x20))) + '"\\/\x7f\u2028\u2029é漢🙂'


def _chat(model: str) -> Sample:
    def sample(index: int, text: str) -> BaseModel:
        choice = ChunkChoice(index=index, delta={"content": text})
        return ChatCompletionChunk(
            id="chatcmpl-1f", created=1_700_000_000, model=model, choices=[choice]
        )

    return sample


def _completion(model: str) -> Sample:
    def sample(index: int, text: str) -> BaseModel:
        choice = CompletionChoice(index=index, text=text, finish_reason=None)
        return Completion(id="cmpl-2e", created=1_700_000_000, model=model, choices=[choice])

    return sample


KINDS = pytest.mark.parametrize("kind", [_chat, _completion], ids=["chat", "completions"])
USAGE = pytest.mark.parametrize("include_usage", [True, False], ids=["usage", "no-usage"])


@KINDS
@USAGE
@given(index=st.integers(min_value=0, max_value=2**31), text=st.text())
def test_a_text_chunk_is_what_pydantic_writes(
    kind: Callable[[str], Sample], include_usage: bool, index: int, text: str
) -> None:
    sample, exclude = kind("qwen"), chunk_exclusions(include_usage)
    encoded = TextChunks(sample, exclude).chunk(index, text)
    assert encoded == sample(index, text).model_dump_json(exclude=exclude).encode()


@KINDS
@USAGE
def test_every_character_json_escapes_is_escaped_as_pydantic_does(
    kind: Callable[[str], Sample], include_usage: bool
) -> None:
    sample, exclude = kind("qwen"), chunk_exclusions(include_usage)
    chunks = TextChunks(sample, exclude)
    for text in (AWKWARD, *AWKWARD):
        assert chunks.chunk(3, text) == sample(3, text).model_dump_json(exclude=exclude).encode()


@KINDS
@pytest.mark.parametrize("model", [_TEXT, f"x{_TEXT}", ":987654321,", "987654321"])
def test_a_model_name_like_the_marks_changes_nothing(
    kind: Callable[[str], Sample], model: str
) -> None:
    """The client names the model: one that holds a mark as the sample has
    it makes the cut ambiguous, so that stream's chunks are models, dumped by
    the framing as before; the others are cut all the same."""
    sample = kind(model)
    chunk = TextChunks(sample, None).chunk(0, "hi")
    written = chunk if isinstance(chunk, bytes) else chunk.model_dump_json().encode()
    assert written == sample(0, "hi").model_dump_json().encode()
    assert isinstance(chunk, bytes) == (model not in (_TEXT, ":987654321,"))
