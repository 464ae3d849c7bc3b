"""Liveness (/healthz) and readiness (/readyz) for load balancers and systemd.

With `auth = required`, /readyz tells a caller without a valid key only
whether cortex is ready: the models (served, or missing) are listed to a
key, and only those it may use, as /v1/models does.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from axon.errors import AuthenticationError
from cortex.api.gateway import gateway_of
from cortex.auth.principal import ANONYMOUS, Principal

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    neurons = gateway_of(request).neurons
    missing = neurons.missing_models()
    caller = await _caller(request)
    if missing:
        body: dict[str, object] = {"status": "not_ready"}
        if caller is not None:
            body["missing"] = [m for m in missing if caller.may_use(m)]
        return JSONResponse(body, status_code=503)
    if caller is None:
        return JSONResponse({"status": "ready"})
    models = sorted(m for m in neurons.served_models() if caller.may_use(m))
    return JSONResponse({"status": "ready", "models": models})


async def _caller(request: Request) -> Principal | None:
    """Who may see the models: anyone with auth off, else a valid key's
    principal (None: no valid key)."""
    authenticator = gateway_of(request).authenticator
    if authenticator is None:
        return ANONYMOUS
    try:
        return await authenticator.principal(request.headers.get("authorization"))
    except AuthenticationError:
        return None
