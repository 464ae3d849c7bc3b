"""The errors a client can see, written down once.

    NeuraxisError
    ├── InvalidRequestError        400 invalid_request_error          INVALID_ARGUMENT
    │   ├── ContextLengthExceeded  400 ... context_length_exceeded    INVALID_ARGUMENT
    │   └── RequestTooLargeError   413 ... request_too_large          RESOURCE_EXHAUSTED
    ├── AuthenticationError        401 ... invalid_api_key            UNAUTHENTICATED
    ├── RateLimitError             429 requests rate_limit_exceeded   RESOURCE_EXHAUSTED
    │   └── TokenRateLimitError    429 tokens rate_limit_exceeded     RESOURCE_EXHAUSTED
    ├── StoreQuotaError            429 insufficient_quota             RESOURCE_EXHAUSTED
    ├── NotFoundError              404 invalid_request_error          NOT_FOUND
    │   └── ModelNotFoundError     404 ... model_not_found            NOT_FOUND
    ├── UnavailableError           503 server_error, Retry-After      UNAVAILABLE
    │   ├── EngineDiedError        503 ... service_unavailable        UNAVAILABLE
    │   └── ModelOverloadedError   503 ... model_overloaded           UNAVAILABLE
    ├── DeadlineExceededError      504 server_error timeout           DEADLINE_EXCEEDED
    └── InternalError              500 server_error                   INTERNAL

`ERROR_TABLE` is the one place that maps each kind to its HTTP status, its
OpenAI error type and code, and its gRPC status. The neuron raises these,
aborts the gRPC call with the mapped status and names the kind in the trailing
metadata key `neuraxis-error`; cortex turns the status back into the same class
(`from_grpc`) and renders it as the OpenAI error envelope, or, for a Response
that fails after it started, as that Response's `error.code` (invalid_prompt
for the request's own errors, server_error for the rest). The table has no
grpc dependency so that cortex's API layer can use it without one; gRPC codes
are named by their enum member names.

The table's `caused_by_request` column says whose fault an error is: the
request's own (invalid, too large, past the context, unknown model) is
returned to the client as it is, never retried on another neuron and never
counted against the neuron that said so; the rest may be the neuron's.
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR_METADATA_KEY = "neuraxis-error"
PARAM_METADATA_KEY = "neuraxis-param"


class NeuraxisError(Exception):
    """Base of every error that reaches a client; `kind` names it on the wire."""

    kind = "internal"
    default_param: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param if param is not None else self.default_param


class InvalidRequestError(NeuraxisError):
    kind = "invalid_request"


class ContextLengthExceededError(InvalidRequestError):
    kind = "context_length_exceeded"
    default_param = "messages"


class RequestTooLargeError(InvalidRequestError):
    kind = "request_too_large"


class HeadersTooLargeError(InvalidRequestError):
    """A request head past cortex's header count or size limit
    (cortex/http/guard.py)."""

    kind = "headers_too_large"


class RequestTimeoutError(InvalidRequestError):
    """A client that did not send its request head or body within cortex's
    read deadlines (cortex/http/guard.py)."""

    kind = "request_timeout"


class AuthenticationError(NeuraxisError):
    """No API key, or one that is unknown, revoked or expired."""

    kind = "invalid_api_key"


class RateLimitError(NeuraxisError):
    """A key over its requests-per-minute or concurrency limit; retrying
    after `retry_after_ms` may work (Retry-After and retry-after-ms)."""

    kind = "rate_limit_exceeded"

    def __init__(
        self, message: str, *, retry_after_ms: int = 1000, param: str | None = None
    ) -> None:
        super().__init__(message, param=param)
        self.retry_after_ms = retry_after_ms


class TokenRateLimitError(RateLimitError):
    """A key over its tokens-per-minute limit (OpenAI's type "tokens")."""

    kind = "token_rate_limit_exceeded"


class StoreQuotaError(NeuraxisError):
    """A tenant whose stored responses take its whole share of the store:
    nothing more is stored until some are deleted or expire."""

    kind = "insufficient_quota"


class NotFoundError(NeuraxisError):
    kind = "not_found"


class ModelNotFoundError(NotFoundError):
    kind = "model_not_found"
    default_param = "model"


class UnavailableError(NeuraxisError):
    """No replica can take the request now; retrying later may work."""

    kind = "unavailable"

    def __init__(self, message: str, *, retry_after: int = 1, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.retry_after = retry_after


class EngineDiedError(UnavailableError):
    """The neuron's engine died while (or before) serving the request: the
    request may be what killed it, so it is retried at most once."""

    kind = "engine_died"


class ModelOverloadedError(UnavailableError):
    """Every ready replica of the model is at its concurrency cap and the
    model's admission queue is full, or the request waited in it past the
    queue timeout (cortex/routing/admission.py): answered at once, not after
    a long wait."""

    kind = "model_overloaded"


class DeadlineExceededError(NeuraxisError):
    kind = "deadline_exceeded"


# What gRPC says of a call past its timeout: the batched token stream's two
# ends (neuron/session.py, cortex/routing/session_client.py) say the same.
DEADLINE_MESSAGE = "Deadline Exceeded"


class InternalError(NeuraxisError):
    kind = "internal"


@dataclass(frozen=True)
class ErrorMapping:
    http_status: int
    openai_type: str
    openai_code: str | None
    grpc_code: str  # a grpc.StatusCode member name
    # The `error.code` of a Response that failed this way: the Responses API
    # has its own closed set of codes (the SDK's ResponseError), in which a
    # request the model cannot take is "invalid_prompt" and the rest is the
    # server's; the message keeps the detail.
    response_code: str
    # The request itself is at fault: returned to the client, never retried,
    # never counted against the neuron (outlier ejection).
    caused_by_request: bool


# Who is at fault decides the rest of a row: a request's fault is an
# invalid_request_error and an invalid_prompt, the server's a server_error.
def _request_fault(
    http_status: int,
    openai_code: str | None,
    grpc_code: str,
    openai_type: str = "invalid_request_error",
    response_code: str = "invalid_prompt",
) -> ErrorMapping:
    return ErrorMapping(
        http_status, openai_type, openai_code, grpc_code, response_code, caused_by_request=True
    )


def _server_fault(http_status: int, openai_code: str, grpc_code: str) -> ErrorMapping:
    return ErrorMapping(
        http_status, "server_error", openai_code, grpc_code, "server_error", caused_by_request=False
    )


def _rate_limited(openai_type: str) -> ErrorMapping:
    # OpenAI's type names the limit that was hit: requests or tokens.
    return _request_fault(
        429, "rate_limit_exceeded", "RESOURCE_EXHAUSTED", openai_type, "rate_limit_exceeded"
    )


ERROR_TABLE: dict[type[NeuraxisError], ErrorMapping] = {
    InvalidRequestError: _request_fault(400, None, "INVALID_ARGUMENT"),
    ContextLengthExceededError: _request_fault(400, "context_length_exceeded", "INVALID_ARGUMENT"),
    RequestTooLargeError: _request_fault(413, "request_too_large", "RESOURCE_EXHAUSTED"),
    HeadersTooLargeError: _request_fault(431, "headers_too_large", "INVALID_ARGUMENT"),
    RequestTimeoutError: _request_fault(408, "request_timeout", "DEADLINE_EXCEEDED"),
    StoreQuotaError: _request_fault(
        429, "insufficient_quota", "RESOURCE_EXHAUSTED", "insufficient_quota", "rate_limit_exceeded"
    ),
    NotFoundError: _request_fault(404, None, "NOT_FOUND"),
    AuthenticationError: _request_fault(401, "invalid_api_key", "UNAUTHENTICATED"),
    RateLimitError: _rate_limited("requests"),
    TokenRateLimitError: _rate_limited("tokens"),
    ModelNotFoundError: _request_fault(404, "model_not_found", "NOT_FOUND"),
    UnavailableError: _server_fault(503, "service_unavailable", "UNAVAILABLE"),
    EngineDiedError: _server_fault(503, "service_unavailable", "UNAVAILABLE"),
    ModelOverloadedError: _server_fault(503, "model_overloaded", "UNAVAILABLE"),
    DeadlineExceededError: _server_fault(504, "timeout", "DEADLINE_EXCEEDED"),
    InternalError: _server_fault(500, "internal_error", "INTERNAL"),
}

_BY_KIND: dict[str, type[NeuraxisError]] = {cls.kind: cls for cls in ERROR_TABLE}
# When the peer named no kind (it is not a neuron, or it crashed), the status
# code alone decides.
_BY_GRPC_CODE: dict[str, type[NeuraxisError]] = {
    "INVALID_ARGUMENT": InvalidRequestError,
    "OUT_OF_RANGE": InvalidRequestError,
    "NOT_FOUND": NotFoundError,
    "UNAVAILABLE": UnavailableError,
    # gRPC's own refusal of a message past its size limit: the request's size.
    "RESOURCE_EXHAUSTED": RequestTooLargeError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
}


def mapping_for(error: NeuraxisError) -> ErrorMapping:
    for cls in type(error).__mro__:
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]
    raise AssertionError(f"{type(error).__name__} is not in ERROR_TABLE")


def caused_by_request(error: NeuraxisError) -> bool:
    """Whether the request itself is at fault (the table's column)."""
    return mapping_for(error).caused_by_request


def as_data(error: NeuraxisError) -> dict[str, str | None]:
    """The error as plain data (its kind, message and param), for a process
    that hands it to another: the controller's answers over Ray."""
    return {"kind": error.kind, "message": error.message, "param": error.param}


def from_data(data: dict[str, str | None]) -> NeuraxisError:
    """The error `as_data` wrote, as its class again (an unknown kind:
    internal)."""
    cls = _BY_KIND.get(data.get("kind") or "", InternalError)
    return cls(data.get("message") or "", param=data.get("param"))


def from_grpc(grpc_code: str, message: str, kind: str | None, param: str | None) -> NeuraxisError:
    """Rebuild the typed error a neuron raised from its gRPC status."""
    cls = _BY_KIND.get(kind or "") or _BY_GRPC_CODE.get(grpc_code, InternalError)
    if cls is InternalError:
        # The neuron's internal detail stays in the neuron's log.
        return InternalError("the model server failed while handling the request")
    return cls(message, param=param or None)
