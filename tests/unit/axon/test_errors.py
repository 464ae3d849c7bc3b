from __future__ import annotations

import json
from typing import get_args

import pytest
from openai.types.responses.response_error import ResponseError

from axon.errors import (
    ERROR_TABLE,
    ContextLengthExceededError,
    DeadlineExceededError,
    EngineDiedError,
    InternalError,
    InvalidRequestError,
    ModelNotFoundError,
    NeuraxisError,
    NotFoundError,
    RequestTooLargeError,
    UnavailableError,
    as_data,
    caused_by_request,
    from_data,
    from_grpc,
    mapping_for,
)


def test_every_error_class_has_a_distinct_kind_and_a_mapping() -> None:
    kinds = [cls.kind for cls in ERROR_TABLE]
    assert len(kinds) == len(set(kinds))
    for cls in ERROR_TABLE:
        assert mapping_for(cls("x")) is ERROR_TABLE[cls]


@pytest.mark.parametrize(
    ("error", "status", "type_", "code", "grpc_code"),
    [
        (InvalidRequestError("x"), 400, "invalid_request_error", None, "INVALID_ARGUMENT"),
        (
            ContextLengthExceededError("x"),
            400,
            "invalid_request_error",
            "context_length_exceeded",
            "INVALID_ARGUMENT",
        ),
        (ModelNotFoundError("x"), 404, "invalid_request_error", "model_not_found", "NOT_FOUND"),
        (UnavailableError("x"), 503, "server_error", "service_unavailable", "UNAVAILABLE"),
        (DeadlineExceededError("x"), 504, "server_error", "timeout", "DEADLINE_EXCEEDED"),
        (InternalError("x"), 500, "server_error", "internal_error", "INTERNAL"),
    ],
)
def test_table(
    error: NeuraxisError, status: int, type_: str, code: str | None, grpc_code: str
) -> None:
    m = mapping_for(error)
    assert (m.http_status, m.openai_type, m.openai_code, m.grpc_code) == (
        status,
        type_,
        code,
        grpc_code,
    )


def test_default_params() -> None:
    assert ModelNotFoundError("x").param == "model"
    assert ContextLengthExceededError("x").param == "messages"
    assert InvalidRequestError("x", param="temperature").param == "temperature"


def test_from_grpc_prefers_the_named_kind() -> None:
    e = from_grpc("INVALID_ARGUMENT", "too long", "context_length_exceeded", "messages")
    assert (
        type(e) is ContextLengthExceededError and e.message == "too long" and e.param == "messages"
    )
    e = from_grpc("NOT_FOUND", "nope", "model_not_found", None)
    assert type(e) is ModelNotFoundError and e.param == "model"


def test_from_grpc_falls_back_to_the_status_code() -> None:
    assert type(from_grpc("INVALID_ARGUMENT", "bad", None, None)) is InvalidRequestError
    assert type(from_grpc("NOT_FOUND", "x", None, None)) is NotFoundError
    assert type(from_grpc("UNAVAILABLE", "x", None, None)) is UnavailableError
    assert type(from_grpc("DEADLINE_EXCEEDED", "x", None, None)) is DeadlineExceededError


def test_internal_details_do_not_leak() -> None:
    e = from_grpc("INTERNAL", "Traceback (most recent call last): ...", None, None)
    assert type(e) is InternalError and "Traceback" not in e.message
    assert type(from_grpc("UNKNOWN", "boom", None, None)) is InternalError


def test_every_response_code_is_one_the_responses_api_has() -> None:
    """A failed Response carries the table's response_code; the strict SDK
    accepts only the codes of its ResponseError."""
    codes = set(get_args(ResponseError.model_fields["code"].annotation))
    for mapping in ERROR_TABLE.values():
        assert mapping.response_code in codes
    assert mapping_for(ContextLengthExceededError("x")).response_code == "invalid_prompt"
    assert mapping_for(InternalError("x")).response_code == "server_error"


@pytest.mark.parametrize(
    ("error", "by_request"),
    [
        (InvalidRequestError("x"), True),
        (ContextLengthExceededError("x"), True),
        (RequestTooLargeError("x"), True),
        (NotFoundError("x"), True),
        (ModelNotFoundError("x"), True),
        (UnavailableError("x"), False),
        (EngineDiedError("x"), False),
        (DeadlineExceededError("x"), False),
        (InternalError("x"), False),
    ],
)
def test_the_table_says_which_errors_the_request_caused(
    error: NeuraxisError, by_request: bool
) -> None:
    assert caused_by_request(error) is by_request


def test_grpcs_own_message_size_refusal_is_the_requests_fault() -> None:
    e = from_grpc("RESOURCE_EXHAUSTED", "Received message larger than max", None, None)
    assert type(e) is RequestTooLargeError and caused_by_request(e)


def test_a_dead_engine_is_a_kind_of_unavailable() -> None:
    e = from_grpc("UNAVAILABLE", "the neuron's engine has died", "engine_died", None)
    assert type(e) is EngineDiedError and mapping_for(e).http_status == 503


def test_every_error_survives_its_plain_data_form() -> None:
    """The controller's refusals cross Ray as plain data (as_data) and are
    raised again as the same class, message and param (from_data)."""
    for cls in ERROR_TABLE:
        error = cls("why", param="source")
        again = from_data(json.loads(json.dumps(as_data(error))))
        assert (type(again), again.message, again.param) == (cls, "why", "source")
    unknown = from_data({"kind": "from_a_newer_version", "message": "m", "param": None})
    assert type(unknown) is InternalError
