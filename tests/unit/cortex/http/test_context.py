"""The per-request context: made once per request, shared by the request
and the middlewares that only see its scope, anonymous until authenticated."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import Scope

from cortex.auth.principal import ANONYMOUS
from cortex.http.context import RequestContext, context_in, context_of
from cortex.schemas.surfaces import CHAT


def test_a_new_request_has_an_empty_anonymous_context() -> None:
    context = context_in({"type": "http"})
    assert context == RequestContext()
    assert context.principal is ANONYMOUS and context.surface is None and not context.tracked


def test_the_request_and_its_scope_share_one_context() -> None:
    scope: Scope = {"type": "http", "state": {}}
    context_of(Request(scope)).surface = CHAT
    assert context_in(scope).surface is CHAT
    assert context_in(scope) is context_of(Request(scope))


def test_each_request_gets_its_own() -> None:
    first, second = context_in({"type": "http"}), context_in({"type": "http"})
    first.request_id = "chatcmpl-1"
    assert second.request_id is None
