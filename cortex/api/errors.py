"""The handlers that turn every error of a request, cortex's own and
FastAPI's and Starlette's (validation, unknown routes, bad JSON), into the
OpenAI error envelope (rendered by cortex/http/errors.py from
axon.errors.ERROR_TABLE), and count the API requests that failed
before they were routed. Nothing here ever puts a stack trace in a body.
"""

from __future__ import annotations

import logging
import re
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from axon.errors import (
    InternalError,
    InvalidRequestError,
    NeuraxisError,
    NotFoundError,
)
from cortex import metrics
from cortex.api.lifecycle import outcome_of
from cortex.http.context import context_of
from cortex.http.errors import error_envelope, error_response, unexpected_message
from cortex.recording import Recorder
from cortex.schemas.surfaces import surface_at

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


def _count_rejected(recorder: Recorder, request: Request, error: BaseException) -> None:
    """Count an API request that failed before it was routed (routed ones are
    counted by their tracker)."""
    surface = surface_at(request.url.path)
    if surface is not None and not context_of(request).tracked:
        recorder.rejected(surface.name, metrics.UNKNOWN_MODEL, outcome_of(error))


def install_error_handlers(app: FastAPI, recorder: Recorder) -> None:
    """`recorder` counts the API requests that fail before they are routed."""

    @app.exception_handler(NeuraxisError)
    async def _neuraxis(request: Request, exc: NeuraxisError) -> JSONResponse:
        _count_rejected(recorder, request, exc)
        if type(exc) is InternalError:  # not a subclass: those say what happened on purpose
            return _internal(request, exc.message)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        error = validation_error(exc)
        _count_rejected(recorder, request, error)
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
        _count_rejected(recorder, request, exc)
        return _internal(request, None)


def _ids(request: Request) -> dict[str, str]:
    """The request's id for the log: the one its API handler made, or a new one."""
    context = context_of(request)
    if context.request_id is None:
        context.request_id = f"req_{uuid.uuid4().hex}"
    return {"request_id": context.request_id}


def _internal(request: Request, detail: str | None) -> JSONResponse:
    """A 500: the client gets a generic message and an id to quote; the
    details (what failed, where) are in the log under that id."""
    ids = _ids(request)
    if detail is not None:
        log.error("internal error on %s: %s", request.url.path, detail, extra=ids)
    response = error_response(InternalError(unexpected_message(ids["request_id"])))
    response.headers["X-Request-Id"] = ids["request_id"]
    return response
