"""Liveness (/healthz) and readiness (/readyz) for load balancers and systemd."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from cortex.routing.pool import NeuronPool

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    pool: NeuronPool = request.app.state.pool
    missing = pool.missing_models()
    if missing:
        return JSONResponse({"status": "not_ready", "missing": missing}, status_code=503)
    return JSONResponse({"status": "ready", "models": sorted(pool.served_models())})
