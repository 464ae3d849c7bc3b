"""The response object's fields that echo the request (`request_fields`),
and the key set every response object carries.

Every field of the openai SDK's `Response` model is present in every
response object, snapshot and stored copy, with its value or null (a client
reading `response.service_tier` must not find the key missing), plus the
two sampling penalties of the Open Responses specification and `store`.
The builder (builder.py) owns the keys that change as a response runs
(status, output, usage, completed_at...); this module owns the rest.
"""

from __future__ import annotations

from typing import Any

from cortex.schemas.responses import ResponsesRequest

# Features of OpenAI's service this server does not have: always null.
_ABSENT = (
    "access_programs",
    "conversation",
    "image",
    "input_transformations",
    "moderation",
    "prompt",
    "prompt_cache_diagnostics",
    "prompt_cache_options",
    "tool_usage",
)
# One tier is served, whatever was asked for; OpenAI answers the tier used.
SERVICE_TIER = "default"


def request_fields(body: ResponsesRequest) -> dict[str, Any]:
    """The response object's echo of the request's settings."""
    choice: Any = body.tool_choice or "auto"
    if not isinstance(choice, str):
        choice = choice.model_dump(exclude_none=True)
    text = {"format": {"type": "text"}}
    if body.text is not None and body.text.format is not None:
        text = {"format": body.text.format.model_dump(by_alias=True, exclude_none=True)}
    fields: dict[str, Any] = {
        "instructions": body.instructions,
        "model": body.model,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "tool_choice": choice,
        "tools": [t.model_dump(by_alias=True, exclude_none=True) for t in body.tools or []],
        "temperature": body.temperature,
        "top_p": body.top_p,
        "frequency_penalty": body.frequency_penalty,
        "presence_penalty": body.presence_penalty,
        "top_logprobs": body.top_logprobs,
        "metadata": body.metadata or {},
        "previous_response_id": body.previous_response_id,
        "store": body.store,
        "text": text,
        "reasoning": {"effort": None, "summary": None},
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": body.max_tool_calls,
        "truncation": body.truncation or "disabled",
        "user": body.user,
        "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
        "prompt_cache_retention": body.prompt_cache_retention,
        "service_tier": SERVICE_TIER,
        "background": False,
        **dict.fromkeys(_ABSENT),
    }
    if body.client_metadata is not None:
        # Not an SDK field: present only when the client sent it, so that
        # it is kept with the stored response and returned by retrieve.
        fields["client_metadata"] = body.client_metadata
    return fields
