"""Every error cortex returns, rendered as the OpenAI error envelope.

The status, type and code come from neuraxis.core.errors.ERROR_TABLE; this module
only renders them and installs the handlers that turn FastAPI's and
Starlette's own errors (validation, unknown routes, bad JSON) into the same
envelope. Nothing here ever puts a stack trace in a body.
"""

from __future__ import annotations

import logging
import re
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cortex import metrics
from cortex.http.errors import error_envelope, error_response, unexpected_message
from neuraxis.core.errors import (
    InternalError,
    InvalidRequestError,
    NeuraxisError,
    NotFoundError,
)

log = logging.getLogger("neuraxis.cortex")

_FIELD_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_LOCATIONS = {"body", "query", "path", "header", "cookie"}


def validation_error(exc: RequestValidationError) -> NeuraxisError:
    """Name the first offending field the way OpenAI does ("messages[0].role")."""
    errors = exc.errors()
    # For a union, pydantic reports every member it tried; the one that got
    # furthest into the value says most about what is wrong.
    first = (
        max(errors, key=lambda e: len(e.get("loc", ())))
        if errors
        else {"loc": (), "msg": "invalid request", "type": ""}
    )
    if first.get("type") == "json_invalid":
        return InvalidRequestError(
            "We could not parse the JSON body of your request. Please send valid JSON."
        )
    loc = list(first.get("loc", ()))
    # FastAPI says where it looked first ("body", "query", "path"); the client
    # named the parameter alone.
    if loc and loc[0] in _LOCATIONS:
        loc = loc[1:]
    param = ""
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        elif not _is_type_tag(str(part)):
            param += f".{part}" if param else str(part)
    message = str(first.get("msg", "invalid value"))
    if first.get("type") == "extra_forbidden":
        message = f"Unrecognized request argument supplied: {param.rsplit('.', 1)[-1]}"
    elif first.get("type") == "missing":
        message = f"Missing required parameter: '{param}'."
    else:
        message = f"Invalid value for '{param}': {message.removeprefix('Value error, ')}"
    return InvalidRequestError(message, param=param or None)


def _is_type_tag(part: str) -> bool:
    # pydantic puts the union member it tried into the location ("str",
    # "constrained-str", "literal['a','b']", "NamedToolChoice"); OpenAI's
    # field names are snake_case identifiers.
    return not _FIELD_NAME.match(part) or part in {"str", "int", "float", "bool", "dict", "list"}


_API_OF_PATH = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
}


def _count_rejected(request: Request, error: BaseException) -> None:
    """Count an API request that failed before it was routed (routed ones are
    counted by their tracker)."""
    api = _API_OF_PATH.get(request.url.path)
    if api is not None and not getattr(request.state, "tracked", False):
        metrics.record_rejected(api, metrics.UNKNOWN_MODEL, error)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(NeuraxisError)
    async def _neuraxis(request: Request, exc: NeuraxisError) -> JSONResponse:
        _count_rejected(request, exc)
        if type(exc) is InternalError:  # not a subclass: those say what happened on purpose
            return _internal(request, exc.message)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        error = validation_error(exc)
        _count_rejected(request, error)
        return error_response(error)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error_response(NotFoundError(f"Unknown path {request.url.path}"))
        error = InvalidRequestError(str(exc.detail))
        body = error_envelope(error).model_dump()
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path, extra=_ids(request))
        _count_rejected(request, exc)
        return _internal(request, None)


def _ids(request: Request) -> dict[str, str]:
    """The request's id for the log: the one its API handler made, or a new one."""
    request_id = getattr(request.state, "request_id", None)
    if not isinstance(request_id, str):
        request_id = request.state.request_id = f"req_{uuid.uuid4().hex}"
    return {"request_id": request_id}


def _internal(request: Request, detail: str | None) -> JSONResponse:
    """A 500: the client gets a generic message and an id to quote; the
    details (what failed, where) are in the log under that id."""
    ids = _ids(request)
    if detail is not None:
        log.error("internal error on %s: %s", request.url.path, detail, extra=ids)
    response = error_response(InternalError(unexpected_message(ids["request_id"])))
    response.headers["X-Request-Id"] = ids["request_id"]
    return response
