"""Filling the tool and output-format parts of the internal request, which
chat completions and the Responses API spell differently on the wire but
mean the same by."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from cortex import metrics
from cortex.routing.pool import NeuronPool
from neuraxis.core.v1 import neuron_pb2 as pb

_TOOL_MODES = {
    "none": pb.TOOL_CHOICE_MODE_NONE,
    "auto": pb.TOOL_CHOICE_MODE_AUTO,
    "required": pb.TOOL_CHOICE_MODE_REQUIRED,
}
_FORMATS = {
    "text": pb.RESPONSE_FORMAT_KIND_TEXT,
    "json_object": pb.RESPONSE_FORMAT_KIND_JSON_OBJECT,
    "json_schema": pb.RESPONSE_FORMAT_KIND_JSON_SCHEMA,
}


def tool(name: str, description: str | None, parameters: Any, strict: bool | None) -> pb.Tool:
    return pb.Tool(
        name=name,
        description=description or "",
        parameters_json=json.dumps(parameters) if parameters else "",
        strict=bool(strict),
    )


def set_tool_choice(
    request: pb.GenerateRequest, mode: str | None, named: str | None, parallel: bool | None
) -> None:
    """`mode` is none/auto/required, or None with `named` naming a function."""
    if parallel is not None:
        request.parallel_tool_calls = parallel
    if named is not None:
        request.tool_choice.mode = pb.TOOL_CHOICE_MODE_NAMED
        request.tool_choice.name = named
    elif mode is not None:
        request.tool_choice.mode = _TOOL_MODES[mode]


def set_format(request: pb.GenerateRequest, kind: str, schema: dict[str, Any] | None) -> None:
    request.response_format.kind = _FORMATS[kind]
    if schema is not None:
        request.response_format.schema_json = json.dumps(schema)


def dispatch(
    request: Request, api: str, model: str, request_id: str, internals: list[pb.GenerateRequest]
) -> list[AsyncIterator[pb.GenerateResponse]]:
    """Route the internal requests of one API request, observed by one tracker
    (metrics and the request's log line)."""
    pool: NeuronPool = request.app.state.pool
    tracker = metrics.start(api, pool.model_label(model), request_id, parts=len(internals))
    request.state.tracked = True  # the error handlers must not count it again
    return [metrics.tracked(pool.generate(r), tracker) for r in internals]
