"""A batch's input lines and result lines, as pure functions: what makes an
input line runnable (`parse_line`), and the JSONL shapes of OpenAI's output
and error files (`output_line`, `error_line`, `refused_line`).

An input line is one request: `{"custom_id": ..., "method": "POST", "url":
<the batch's endpoint>, "body": {...}}`. A line that is not that (not JSON,
no custom_id, another method or url, a body that is not an object, a
streamed request) is not run: it goes to the error file, under its
custom_id when it has one, with its line number in the message. Line
numbers count from 1, blank lines included (the numbers an editor shows);
blank lines are skipped.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")


@dataclass(frozen=True)
class BatchLine:
    """A runnable line: its request body for the batch's endpoint."""

    number: int
    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True)
class LineError:
    """A line that cannot run: what its error file line says."""

    number: int
    custom_id: str | None
    code: str
    message: str


def parse_line(number: int, raw: bytes, endpoint: str) -> BatchLine | LineError | None:
    """Line `number` (from 1) of the input file; None for a blank line."""
    text = raw.strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return LineError(number, None, "invalid_json_line", f"Line {number} is not valid JSON.")
    if not isinstance(value, dict):
        return LineError(number, None, "invalid_json_line", f"Line {number} is not a JSON object.")
    custom_id = value.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return LineError(
            number,
            None,
            "missing_required_parameter",
            f"Line {number} has no 'custom_id' (a non-empty string).",
        )

    def refused(code: str, message: str) -> LineError:
        return LineError(number, custom_id, code, f"Line {number}: {message}")

    if value.get("method") != "POST":
        return refused("invalid_method", "'method' must be 'POST'.")
    if value.get("url") != endpoint:
        return refused(
            "invalid_url",
            f"'url' must be the batch's endpoint '{endpoint}', not {value.get('url')!r}.",
        )
    body = value.get("body")
    if not isinstance(body, dict):
        return refused("invalid_request", "'body' must be a JSON object.")
    if body.get("stream"):
        return refused("invalid_request", "a batch line cannot be streamed ('stream': true).")
    if body.get("background"):
        return refused("invalid_request", "a batch line cannot be a background response.")
    return BatchLine(number, custom_id, body)


def _request_id() -> str:
    return f"batch_req_{uuid.uuid4().hex}"


def output_line(custom_id: str, status: int, request_id: str, body: Any) -> str:
    """A request that was answered (any status: 2xx goes to the output
    file, the rest to the error file, in the same shape)."""
    return json.dumps(
        {
            "id": _request_id(),
            "custom_id": custom_id,
            "response": {"status_code": status, "request_id": request_id, "body": body},
            "error": None,
        }
    )


def error_line(custom_id: str | None, code: str, message: str) -> str:
    """A request that never got an answer: refused, cancelled, expired."""
    return json.dumps(
        {
            "id": _request_id(),
            "custom_id": custom_id,
            "response": None,
            "error": {"code": code, "message": message},
        }
    )


def refused_line(error: LineError) -> str:
    return error_line(error.custom_id, error.code, error.message)


def usage_of(line: str) -> tuple[int, int]:
    """(input, output) tokens of an output line's answer (0, 0 without usage)."""
    response = json.loads(line).get("response") or {}
    usage = (response.get("body") or {}).get("usage") or {}
    prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    return int(prompt or 0), int(completion or 0)


def split_lines(buffer: bytearray, chunk: bytes) -> list[bytes]:
    """Append `chunk` to `buffer`; the complete lines it now holds (without
    their newline), leaving the unfinished tail in `buffer`."""
    buffer += chunk
    end = buffer.rfind(b"\n")
    if end < 0:
        return []
    done = bytes(buffer[:end])
    del buffer[: end + 1]
    return done.split(b"\n")
