"""The OpenAPI schema cortex publishes at /openapi.json.

FastAPI already describes the request bodies from the pydantic models in
cortex/schemas/ (validation mode: exactly what a request must be to pass).
What it gets wrong is the errors: it advertises a 422 `HTTPValidationError`
that cortex never sends (api/errors.py answers a failed validation with a
400 in the OpenAI envelope). This module replaces that with the statuses
cortex does answer, each with the `ErrorEnvelope` schema, derived from the
one error table (axon.errors.ERROR_TABLE) so that a new error kind
shows up here by itself; it declares the bearer key on the /v1 routes when
`auth = required`, the event stream beside JSON where a route can stream,
and the links from a created Response to the routes that take its id (what
a client, or schemathesis's stateful tests, can do next).

Routes, bodies and handlers are not defined here; this only describes them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from axon.errors import ERROR_TABLE, AuthenticationError, RateLimitError
from cortex.schemas.errors import ErrorEnvelope

API_PREFIX = "/v1/"
BEARER = "bearerAuth"
_ENVELOPE_REF = {"$ref": "#/components/schemas/ErrorEnvelope"}
# Statuses only a caller with keys can meet.
_AUTH_ONLY = {ERROR_TABLE[AuthenticationError].http_status, ERROR_TABLE[RateLimitError].http_status}
# Routes that answer a stream of server-sent events when asked (`stream`).
_STREAMING = {
    ("post", "/v1/chat/completions"),
    ("post", "/v1/completions"),
    ("post", "/v1/responses"),
    ("get", "/v1/responses/{response_id}"),
}
# What a created Response's id leads to: link name → (method, path).
_RESPONSE_LINKS = {
    "RetrieveResponse": ("get", "/v1/responses/{response_id}"),
    "ListInputItems": ("get", "/v1/responses/{response_id}/input_items"),
    "CancelResponse": ("post", "/v1/responses/{response_id}/cancel"),
    "DeleteResponse": ("delete", "/v1/responses/{response_id}"),
}


def error_responses(auth_required: bool) -> dict[str, dict[str, Any]]:
    """Each HTTP status of the error table (the auth ones only with keys),
    described by the OpenAI codes it carries, with the envelope schema."""
    codes: dict[int, set[str]] = defaultdict(set)
    for mapping in ERROR_TABLE.values():
        if mapping.http_status in _AUTH_ONLY and not auth_required:
            continue
        codes[mapping.http_status].add(mapping.openai_code or mapping.openai_type)
    return {
        str(status): {
            "description": "OpenAI error envelope: " + ", ".join(sorted(codes[status])),
            "content": {"application/json": {"schema": _ENVELOPE_REF}},
        }
        for status in sorted(codes)
    }


def build_schema(app: FastAPI, auth_required: bool) -> dict[str, Any]:
    """The app's schema, with cortex's real error answers in it."""
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas["ErrorEnvelope"] = ErrorEnvelope.model_json_schema(
        ref_template="#/components/schemas/{model}"
    )
    schemas.update(schemas["ErrorEnvelope"].pop("$defs", {}))
    if auth_required:
        components["securitySchemes"] = {
            BEARER: {
                "type": "http",
                "scheme": "bearer",
                "description": "a key from `neuraxis keys create`",
            }
        }
    errors = error_responses(auth_required)
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            if not path.startswith(API_PREFIX):
                continue
            responses.update(errors)
            if auth_required:
                operation["security"] = [{BEARER: []}]
            if (method, path) in _STREAMING:
                ok = responses.setdefault("200", {"description": "Successful Response"})
                # No schema: the events are each surface's own (chunks,
                # Responses events), framed as SSE; a schema for the
                # whole stream would describe nothing a client can check.
                ok.setdefault("content", {})["text/event-stream"] = {}
    _link_responses(schema)
    return schema


def _link_responses(schema: dict[str, Any]) -> None:
    paths = schema.get("paths", {})
    created = paths.get("/v1/responses", {}).get("post")
    if created is None:
        return
    links = {}
    for name, (method, path) in _RESPONSE_LINKS.items():
        target = paths.get(path, {}).get(method)
        if target is not None:
            links[name] = {
                "operationId": target["operationId"],
                "parameters": {"response_id": "$response.body#/id"},
            }
    created["responses"].setdefault("200", {"description": "Successful Response"})["links"] = links


def install(app: FastAPI, auth_required: bool) -> None:
    """Serve `build_schema`'s schema (built once, on first request) at /openapi.json."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_schema(app, auth_required)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
