"""The fuzz run's judge (checks.py), on answers written by hand: each
check passes what cortex should answer and catches what it must not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fuzz.checks import answer_problems, envelope_problems, sse_problems


def _error(type_: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": "m", "type": type_, "param": param, "code": code}}


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, _error("invalid_request_error", None, "messages")),
        (400, _error("invalid_request_error", "context_length_exceeded")),
        (401, _error("invalid_request_error", "invalid_api_key")),
        (404, _error("invalid_request_error", "model_not_found", "model")),
        (404, _error("invalid_request_error", None)),
        (413, _error("invalid_request_error", "request_too_large")),
        (429, _error("tokens", "rate_limit_exceeded")),
    ],
)
def test_an_envelope_at_its_status_passes(status: int, body: dict[str, Any]) -> None:
    assert envelope_problems(status, body) == []
    assert answer_problems(status, "application/json", json.dumps(body)) == []


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (422, {"detail": [{"loc": ["body"], "msg": "x"}]}, "not {'error'"),
        (400, {"error": "bad"}, "the error has"),
        (400, {"error": {"message": "m", "type": "invalid_request_error"}}, "the error has"),
        (400, {**_error("invalid_request_error", None), "extra": 1}, "not {'error'"),
        (400, _error("invalid_request_error", "model_not_found"), "is not answered with 400"),
        (401, _error("invalid_request_error", None), "is not answered with 401"),
        (404, {"error": {"message": "", "type": "x", "param": None, "code": None}}, "message"),
        (400, {"error": {"message": "m", "type": 3, "param": None, "code": None}}, "type"),
        (400, {"error": {"message": "m", "type": "t", "param": 1, "code": None}}, "param"),
    ],
)
def test_a_bare_or_misplaced_error_is_caught(status: int, body: Any, problem: str) -> None:
    problems = envelope_problems(status, body)
    assert problems and problem in problems[0], problems


def test_a_server_error_fails_whatever_its_body() -> None:
    body = json.dumps(_error("server_error", "internal_error"))
    assert answer_problems(500, "application/json", body)
    assert answer_problems(503, "application/json", body)


def test_an_error_body_that_is_not_json_fails() -> None:
    assert answer_problems(400, "text/plain", "Bad Request")


def test_a_stream_of_json_events_passes_and_its_error_chunk_is_an_envelope() -> None:
    error = json.dumps(_error("server_error", "internal_error"))
    good = f'data: {{"id": "c", "choices": []}}\n\ndata: {error}\n\ndata: [DONE]\n\n'
    assert sse_problems(good) == []
    events = 'event: response.failed\ndata: {"type": "response.failed", "error": {"code": "x"}}\n\n'
    assert answer_problems(200, "text/event-stream; charset=utf-8", events) == []


def test_a_stream_line_ends_only_at_cr_or_lf() -> None:
    # JSON may carry U+0085 and U+2028 raw inside a string; SSE does not
    # end a line there (and neither does the openai SDK's decoder).
    text = json.dumps(
        {"type": "response.created", "instructions": "a\x85b\u2028c"}, ensure_ascii=False
    )
    assert sse_problems(f"event: response.created\r\ndata: {text}\r\n\r\n") == []


@pytest.mark.parametrize(
    "stream",
    [
        "data: {not json\n\n",
        'data: {"error": "boom"}\n\ndata: [DONE]\n\n',
        'data: {"error": {"message": "boom"}}\n\ndata: [DONE]\n\n',
    ],
)
def test_a_broken_stream_is_caught(stream: str) -> None:
    assert answer_problems(200, "text/event-stream", stream)
