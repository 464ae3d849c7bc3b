"""A batch's input lines (what runs, what goes to the error file and under
which line number) and the JSONL shapes of its output and error files."""

from __future__ import annotations

import json

import pytest

from cortex.api.batches.lines import (
    BatchLine,
    LineError,
    error_line,
    output_line,
    parse_line,
    refused_line,
    split_lines,
    usage_of,
)

CHAT = "/v1/chat/completions"


def _line(**fields: object) -> bytes:
    base: dict[str, object] = {
        "custom_id": "a",
        "method": "POST",
        "url": CHAT,
        "body": {"model": "m", "messages": []},
    }
    return json.dumps({**base, **fields}).encode()


def test_a_good_line_is_its_body() -> None:
    parsed = parse_line(3, _line(), CHAT)
    assert parsed == BatchLine(3, "a", {"model": "m", "messages": []})


def test_a_blank_line_is_skipped() -> None:
    assert parse_line(1, b"  \r", CHAT) is None


@pytest.mark.parametrize(
    ("raw", "custom_id", "code"),
    [
        (b"{nope", None, "invalid_json_line"),
        (b"[1, 2]", None, "invalid_json_line"),
        (b"\xff\xfe", None, "invalid_json_line"),
        (_line(custom_id=""), None, "missing_required_parameter"),
        (_line(custom_id=7), None, "missing_required_parameter"),
        (_line(method="GET"), "a", "invalid_method"),
        (_line(url="/v1/embeddings"), "a", "invalid_url"),
        (_line(body="text"), "a", "invalid_request"),
        (_line(body={"model": "m", "stream": True}), "a", "invalid_request"),
        (_line(body={"model": "m", "background": True}), "a", "invalid_request"),
    ],
)
def test_a_bad_line_says_its_number_and_id(raw: bytes, custom_id: str | None, code: str) -> None:
    parsed = parse_line(12, raw, CHAT)
    assert isinstance(parsed, LineError)
    assert (parsed.number, parsed.custom_id, parsed.code) == (12, custom_id, code)
    assert "Line 12" in parsed.message
    written = json.loads(refused_line(parsed))
    assert written["custom_id"] == custom_id and written["response"] is None
    assert written["error"] == {"code": code, "message": parsed.message}


def test_output_and_error_lines_in_openais_shape() -> None:
    out = json.loads(output_line("x", 200, "chatcmpl-1", {"object": "chat.completion"}))
    assert set(out) == {"id", "custom_id", "response", "error"}
    assert out["id"].startswith("batch_req_") and out["error"] is None
    assert out["response"] == {
        "status_code": 200,
        "request_id": "chatcmpl-1",
        "body": {"object": "chat.completion"},
    }
    err = json.loads(error_line("y", "batch_expired", "late"))
    assert err["response"] is None and err["error"] == {"code": "batch_expired", "message": "late"}


def test_usage_of_chat_responses_and_embeddings() -> None:
    chat = output_line("a", 200, "r", {"usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    responses = output_line("b", 200, "r", {"usage": {"input_tokens": 5, "output_tokens": 6}})
    embeddings = output_line("c", 200, "r", {"usage": {"prompt_tokens": 7, "total_tokens": 7}})
    assert [usage_of(x) for x in (chat, responses, embeddings)] == [(3, 4), (5, 6), (7, 0)]
    assert usage_of(error_line("d", "x", "y")) == (0, 0)


def test_split_lines_keeps_the_unfinished_tail() -> None:
    buffer = bytearray()
    assert split_lines(buffer, b"ab") == []
    assert split_lines(buffer, b"c\nde\n\nf") == [b"abc", b"de", b""]
    assert buffer == b"f"
