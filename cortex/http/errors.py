"""The OpenAI error envelope, rendered from axon.errors.ERROR_TABLE:
the one place an error becomes a body, for the API's handlers, the edge's
middleware and protocol, and the streams' terminal events alike. Nothing
here ever puts a stack trace in a body.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from axon.errors import NeuraxisError, RateLimitError, UnavailableError, mapping_for
from cortex.schemas.errors import ErrorBody, ErrorEnvelope


def unexpected_message(request_id: str) -> str:
    """What a client is told of an error nobody expected: nothing of its
    cause, and the request id under which the log has the details."""
    return (
        "The server had an error while processing your request. "
        f"Quote request id {request_id} if you report it."
    )


def error_envelope(error: NeuraxisError) -> ErrorEnvelope:
    mapping = mapping_for(error)
    return ErrorEnvelope(
        error=ErrorBody(
            message=error.message,
            type=mapping.openai_type,
            param=error.param,
            code=mapping.openai_code,
        )
    )


def response_error_code(error: NeuraxisError) -> str:
    """The `code` of a failed Response's `error`: the error table's column for
    the Responses API's own closed set of codes."""
    return mapping_for(error).response_code


def error_response(error: NeuraxisError) -> JSONResponse:
    headers = {}
    if isinstance(error, UnavailableError):
        headers["Retry-After"] = str(error.retry_after)
    elif isinstance(error, RateLimitError):
        # The openai SDK prefers the milliseconds; others read Retry-After.
        headers["Retry-After"] = str(max(1, -(-error.retry_after_ms // 1000)))
        headers["retry-after-ms"] = str(error.retry_after_ms)
    return JSONResponse(
        error_envelope(error).model_dump(),
        status_code=mapping_for(error).http_status,
        headers=headers,
    )
