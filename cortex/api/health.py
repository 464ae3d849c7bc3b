"""Liveness (/healthz) and readiness (/readyz) for load balancers and systemd."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from cortex.api.gateway import gateway_of

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    neurons = gateway_of(request).neurons
    missing = neurons.missing_models()
    if missing:
        return JSONResponse({"status": "not_ready", "missing": missing}, status_code=503)
    return JSONResponse({"status": "ready", "models": sorted(neurons.served_models())})
