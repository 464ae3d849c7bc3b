"""One batch line through the normal request path: the same handler an
HTTP request to the batch's endpoint reaches (chat, completions,
embeddings, responses), with the same checks, caps, key limits, admission,
routing, metrics and log line, called in-process on a request of our own
(no HTTP to ourselves). Its answer or error becomes the line's result
(lines.output_line), in the status and envelope a client would have got.

The request carries the batch's principal and never sees a disconnect: a
line is stopped by cancelling its task (a cancel, a lost lease), which
aborts its generation as a leaving client does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from axon.errors import InternalError, NeuraxisError, RateLimitError, UnavailableError, mapping_for
from axon.priority import CLASSES, PriorityClass
from cortex.api import chat, completions, embeddings
from cortex.api.batches.lines import BatchLine, output_line
from cortex.api.errors import validation_error
from cortex.api.responses import routes as responses
from cortex.auth.principal import Principal
from cortex.http.context import context_in
from cortex.http.errors import error_envelope, unexpected_message
from cortex.schemas.chat import ChatCompletionRequest
from cortex.schemas.completions import CompletionRequest
from cortex.schemas.embeddings import EmbeddingRequest
from cortex.schemas.responses import ResponsesRequest

# The class every line runs in: the lowest.
BATCH_CLASS: PriorityClass = CLASSES[-1]
log = logging.getLogger("neuraxis.cortex")

Handler = Callable[[Any, Request], Awaitable[Response]]


@dataclass(frozen=True)
class Endpoint:
    body: type[BaseModel]
    handler: Handler


ENDPOINTS: dict[str, Endpoint] = {
    "/v1/chat/completions": Endpoint(ChatCompletionRequest, chat.create_chat_completion),
    "/v1/completions": Endpoint(CompletionRequest, completions.create_completion),
    "/v1/embeddings": Endpoint(EmbeddingRequest, embeddings.create_embeddings),
    "/v1/responses": Endpoint(ResponsesRequest, responses.create_response),
}

# How long a line refused for want of capacity (503, 429) waits before it
# tries again, at most: a batch fills the capacity left idle, so it waits
# rather than fail.
MAX_BACKOFF_S = 5.0


@dataclass(frozen=True)
class LineResult:
    ok: bool  # a 2xx answer (the output file); otherwise the error file
    line: str  # the result's JSONL line


async def _never() -> Message:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def line_request(app: FastAPI, path: str, principal: Principal) -> Request:
    """A request to `path` acting for `principal`, as the route class would
    have left it after authentication (its body is handed over parsed)."""
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "http_version": "1.1",
        "scheme": "http",
        "server": None,
        "client": None,
        "app": app,
    }
    context_in(scope).principal = principal
    return Request(scope, receive=_never)


async def run_line(
    app: FastAPI,
    endpoint: str,
    principal: Principal,
    line: BatchLine,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> LineResult:
    """Run `line` until it has an answer; one refused for want of capacity
    (503, 429) is tried again after a backoff (`sleep`)."""
    route = ENDPOINTS[endpoint]
    try:
        body = route.body.model_validate(line.body)
    except ValidationError as e:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in e.errors()]
        return _failed(line, validation_error(RequestValidationError(errors)), "")
    if "priority" in type(body).model_fields:
        # Batch work fills the capacity interactive requests leave: every
        # line runs in the lowest class, whatever it asks (axon/priority.py).
        body = body.model_copy(update={"priority": BATCH_CLASS})
    backoff = 0.25
    while True:
        request = line_request(app, endpoint, principal)
        try:
            response = await route.handler(body, request)
        except (UnavailableError, RateLimitError):
            await sleep(backoff)
            backoff = min(2 * backoff, MAX_BACKOFF_S)
            continue
        except NeuraxisError as e:
            return _failed(line, e, context_in(request.scope).request_id or "")
        except Exception:
            request_id = context_in(request.scope).request_id or ""
            log.exception("batch line %d failed", line.number, extra={"request_id": request_id})
            return _failed(line, InternalError(unexpected_message(request_id)), request_id)
        status = response.status_code
        request_id = response.headers.get("x-request-id", "")
        answer = json.loads(bytes(response.body))
        return LineResult(
            200 <= status < 300, output_line(line.custom_id, status, request_id, answer)
        )


def _failed(line: BatchLine, error: NeuraxisError, request_id: str) -> LineResult:
    status = mapping_for(error).http_status
    body = error_envelope(error).model_dump()
    return LineResult(False, output_line(line.custom_id, status, request_id, body))
