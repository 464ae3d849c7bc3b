"""The JSON Schema published for chat messages and response formats says
what their validators check (the rules are written twice, once for pydantic
and once for the schema: these tests hold them together)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, ValidationError

from cortex.schemas.chat import ChatMessageIn, ResponseFormatIn
from cortex.schemas.completions import CompletionRequest

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def _verdicts(model: type[BaseModel], value: dict[str, Any]) -> tuple[bool, bool]:
    published = jsonschema.Draft202012Validator(model.model_json_schema()).is_valid(value)
    try:
        model.model_validate(value)
        validated = True
    except ValidationError:
        validated = False
    return published, validated


@pytest.mark.parametrize(
    ("message", "valid"),
    [
        ({"role": "user", "content": "hi"}, True),
        ({"role": "user"}, False),
        ({"role": "user", "content": None}, False),
        ({"role": "system", "content": "be brief", "tool_calls": [CALL]}, False),
        ({"role": "assistant", "content": "hello"}, True),
        ({"role": "assistant", "tool_calls": [CALL]}, True),
        ({"role": "assistant", "content": None, "tool_calls": [CALL]}, True),
        ({"role": "assistant"}, False),
        ({"role": "assistant", "tool_calls": []}, False),
        ({"role": "tool", "content": "42", "tool_call_id": "c1"}, True),
        ({"role": "tool", "content": "42"}, False),
        ({"role": "tool", "content": "42", "tool_call_id": None}, False),
        ({"role": "tool", "content": "42", "tool_call_id": ""}, False),
    ],
)
def test_the_published_message_rules_are_the_validators(
    message: dict[str, Any], valid: bool
) -> None:
    assert _verdicts(ChatMessageIn, message) == (valid, valid)


@pytest.mark.parametrize(
    ("fmt", "valid"),
    [
        ({"type": "text"}, True),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}, True),
        ({"type": "json_schema"}, False),
        ({"type": "json_schema", "json_schema": None}, False),
    ],
)
def test_the_published_response_format_rule_is_the_validator(
    fmt: dict[str, Any], valid: bool
) -> None:
    assert _verdicts(ResponseFormatIn, fmt) == (valid, valid)


@pytest.mark.parametrize(("penalty", "valid"), [(1.0, True), (None, True), (0.5, False)])
def test_only_the_neutral_length_penalty_is_published_and_accepted(
    penalty: float | None, valid: bool
) -> None:
    body = {"model": "m", "prompt": "hi", "length_penalty": penalty}
    assert _verdicts(CompletionRequest, body) == (valid, valid)
