"""What the fuzz run holds every answer to, as pure functions over a status,
headers and body (unit-tested in test_checks.py without a server).

Pass means: no 5xx; every 4xx in the OpenAI envelope
`{"error": {"message", "type", "param", "code"}}` whose type and code
belong to that status in the error table (axon.errors); a 2xx
stream made of JSON events (an error inside one in the same envelope).
Each check returns the problems it found, empty when the answer passes.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from axon.errors import ERROR_TABLE

ENVELOPE_KEYS = {"message", "type", "param", "code"}
_SSE_LINES = re.compile(r"\r\n|\r|\n")

# Every (type, code) an error may carry, by HTTP status: the error table's
# rows. A few 4xx statuses come from the HTTP layer itself (an unsupported
# method or media type) and carry invalid_request_error with no code.
STATUS_OF: dict[tuple[str, str | None], set[int]] = defaultdict(set)
for _mapping in ERROR_TABLE.values():
    STATUS_OF[(_mapping.openai_type, _mapping.openai_code)].add(_mapping.http_status)
STATUS_OF[("invalid_request_error", None)].update({405, 415})


def shape_problems(body: Any) -> list[str]:
    """What is wrong with the shape of an error body (nothing: [])."""
    if not isinstance(body, dict) or set(body) != {"error"}:
        return [f"the body is not {{'error': {{...}}}}: {str(body)[:200]}"]
    error = body["error"]
    if not isinstance(error, dict) or set(error) != ENVELOPE_KEYS:
        keys = sorted(error) if isinstance(error, dict) else type(error).__name__
        return [f"the error has {keys}, not {sorted(ENVELOPE_KEYS)}"]
    problems = []
    if not isinstance(error["message"], str) or not error["message"]:
        problems.append("message is not a non-empty string")
    if not isinstance(error["type"], str):
        problems.append("type is not a string")
    for key in ("param", "code"):
        if error[key] is not None and not isinstance(error[key], str):
            problems.append(f"{key} is neither a string nor null")
    return problems


def envelope_problems(status: int, body: Any) -> list[str]:
    """What is wrong with an error body answered with `status`: its shape,
    and whether its type and code are this status's in the error table."""
    problems = [f"{status}: {p}" for p in shape_problems(body)]
    if not problems:
        error = body["error"]
        if status not in STATUS_OF.get((error["type"], error["code"]), set()):
            kind = f"type {error['type']!r} code {error['code']!r}"
            problems.append(f"{status}: {kind} is not answered with {status}")
    return problems


def sse_problems(text: str) -> list[str]:
    """What is wrong with an event stream: every `data:` line is JSON (or
    `[DONE]`), and an error chunk in it is the envelope."""
    problems = []
    # An event stream's lines end at CR, LF or CRLF only (str.splitlines
    # would also cut the JSON at a raw U+0085 or U+2028 in a string).
    for line in _SSE_LINES.split(text):
        if not line.startswith("data:"):
            continue
        data = line.removeprefix("data:").strip()
        if data == "[DONE]":
            continue
        try:
            event = json.loads(data)
        except ValueError:
            problems.append(f"stream: data is not JSON: {data[:200]}")
            continue
        # Chat and completions streams end in an error chunk; the Responses
        # API's events carry a `type` and an error object of their own.
        if isinstance(event, dict) and "error" in event and "type" not in event:
            problems += [f"stream: {p}" for p in shape_problems(event)]
    return problems


def answer_problems(status: int, content_type: str, text: str) -> list[str]:
    """Every problem with one answer."""
    if status >= 500:
        return [f"{status}: a server error: {text[:300]}"]
    if status >= 400:
        try:
            body = json.loads(text)
        except ValueError:
            return [f"{status}: the body is not JSON: {text[:200]}"]
        return envelope_problems(status, body)
    if content_type.startswith("text/event-stream"):
        return sse_problems(text)
    return []
