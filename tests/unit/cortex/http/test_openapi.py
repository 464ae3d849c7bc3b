"""The published OpenAPI schema describes what cortex really takes and
answers: every /v1 route that takes a body names its pydantic model, every
/v1 route answers its errors in the OpenAI envelope with the error table's
statuses (never FastAPI's 422), the bearer key is declared exactly when
auth is required, and a created Response links to the routes of its id."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Literal

import pytest
from fastapi.routing import APIRoute

from axon.errors import ERROR_TABLE
from cortex.app import create_app
from cortex.auth.settings import AuthSettings
from cortex.config import CortexSettings, StoreSettings
from cortex.http.openapi import error_responses
from tests.unit.cortex.api.fakes import ScriptedPool

# The routes that read a body: its content type, the model it is validated
# by, and a field that model requires.
BODIES = {
    "/v1/chat/completions": ("application/json", "ChatCompletionRequest", "model"),
    "/v1/completions": ("application/json", "CompletionRequest", "model"),
    "/v1/embeddings": ("application/json", "EmbeddingRequest", "model"),
    "/v1/responses": ("application/json", "ResponsesRequest", "model"),
    "/v1/batches": ("application/json", "BatchCreateRequest", "input_file_id"),
    "/v1/files": ("multipart/form-data", "Body_create_file_v1_files_post", "file"),
}


def _schema(auth: Literal["off", "required"] = "off") -> dict[str, Any]:
    settings = CortexSettings(
        store=StoreSettings(state_dir=Path(tempfile.mkdtemp(prefix="neuraxis-test-"))),
        auth=AuthSettings(mode=auth),
    )
    app = create_app(settings, pool=ScriptedPool([]))
    schema: dict[str, Any] = app.openapi()
    # Every /v1 route of the app is in the schema.
    routes = {r.path_format for r in app.routes if isinstance(r, APIRoute)}
    assert {p for p in routes if p.startswith("/v1/")} <= set(schema["paths"])
    return schema


def _v1_operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, operations in schema["paths"].items()
        if path.startswith("/v1/")
        for method, operation in operations.items()
    ]


def test_every_v1_route_that_takes_a_body_publishes_its_model() -> None:
    schema = _schema()
    for path, method, operation in _v1_operations(schema):
        body: dict[str, Any] | None = operation.get("requestBody")
        if method != "post" or path not in BODIES:
            assert body is None, f"{method} {path} takes no body"
            continue
        assert body is not None, f"{method} {path} publishes no body"
        assert method == "post" and body["required"] is True
        content_type, name, required = BODIES[path]
        ref = body["content"][content_type]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{name}"
        model = schema["components"]["schemas"][name]
        assert required in model["required"] and model["properties"]


def test_every_v1_route_answers_errors_in_the_envelope_never_422() -> None:
    schema = _schema()
    statuses = {str(m.http_status) for m in ERROR_TABLE.values()} - {"401", "429"}
    for path, method, operation in _v1_operations(schema):
        responses = operation["responses"]
        assert "422" not in responses, f"{method} {path}"
        errors = {s for s in responses if s.startswith(("4", "5"))}
        assert errors == statuses, f"{method} {path}: {errors}"
        for status in errors:
            content = responses[status]["content"]["application/json"]["schema"]
            assert content == {"$ref": "#/components/schemas/ErrorEnvelope"}
    envelope = schema["components"]["schemas"]["ErrorEnvelope"]
    body = schema["components"]["schemas"]["ErrorBody"]
    assert envelope["required"] == ["error"]
    assert set(body["required"]) == {"message", "type", "param", "code"}
    assert "HTTPValidationError" not in schema["components"]["schemas"]


@pytest.mark.parametrize("auth", ["off", "required"])
def test_the_bearer_key_is_declared_exactly_when_auth_is_required(
    auth: Literal["off", "required"],
) -> None:
    schema = _schema(auth)
    required = auth == "required"
    assert ("securitySchemes" in schema["components"]) is required
    for path, method, operation in _v1_operations(schema):
        assert ("security" in operation) is required, f"{method} {path}"
        assert ("401" in operation["responses"]) is required
        assert ("429" in operation["responses"]) is required
    for path in ("/healthz", "/readyz"):
        assert "security" not in schema["paths"][path]["get"]


def test_error_descriptions_name_the_codes_of_their_status() -> None:
    described = error_responses(auth_required=True)
    assert "model_not_found" in described["404"]["description"]
    assert "invalid_api_key" in described["401"]["description"]
    assert "rate_limit_exceeded" in described["429"]["description"]


def test_a_created_response_links_to_the_routes_of_its_id() -> None:
    schema = _schema()
    links = schema["paths"]["/v1/responses"]["post"]["responses"]["200"]["links"]
    targets = {
        (method, path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if any(link["operationId"] == operation["operationId"] for link in links.values())
    }
    assert targets == {
        ("get", "/v1/responses/{response_id}"),
        ("get", "/v1/responses/{response_id}/input_items"),
        ("post", "/v1/responses/{response_id}/cancel"),
        ("delete", "/v1/responses/{response_id}"),
    }
    assert all(
        link["parameters"] == {"response_id": "$response.body#/id"} for link in links.values()
    )


def test_streaming_routes_publish_the_event_stream_beside_json() -> None:
    schema = _schema()
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        content = schema["paths"][path]["post"]["responses"]["200"]["content"]
        assert set(content) == {"application/json", "text/event-stream"}
    assert "text/event-stream" not in schema["paths"]["/v1/embeddings"]["post"]["responses"][
        "200"
    ].get("content", {})
