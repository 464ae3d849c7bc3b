"""What cortex knows about one HTTP request besides its body, typed, in one
place: the surface it came in on, its id, who is calling and what its rate
limits reserved. Starlette's `request.state` would hold the same things as
untyped attributes, read back by `getattr` with a default at every use.

It lives in the ASGI scope's state (one key), so that the middlewares of
the edge, which see the scope and not the request, read the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.types import Scope

from cortex.auth.limiter import Admission
from cortex.auth.principal import ANONYMOUS, Principal
from cortex.routing.admission_wait import AdmissionWait
from cortex.schemas.surfaces import Surface

_KEY = "neuraxis.context"


@dataclass
class RequestContext:
    surface: Surface | None = None  # None until an API handler claims the request
    request_id: str | None = None  # the id its answer, log lines and a 500 carry
    principal: Principal = ANONYMOUS  # set by the auth dependency of /v1 routes
    admission: Admission | None = None  # what a rate-limited key reserved
    tracked: bool = False  # a request tracker counts its outcome (errors must not)
    # Its time in the admission queue: told by admission, read by its account.
    waited: AdmissionWait = field(default_factory=AdmissionWait)


def context_in(scope: Scope) -> RequestContext:
    """The request's context, made on first use."""
    state: dict[str, Any] = scope.setdefault("state", {})
    context = state.get(_KEY)
    if not isinstance(context, RequestContext):
        context = state[_KEY] = RequestContext()
    return context


def context_of(request: Request) -> RequestContext:
    return context_in(request.scope)
