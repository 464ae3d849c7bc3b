"""GET /metrics (Prometheus exposition) and GET /sd/neurons (Prometheus
HTTP service discovery: where each neuron's metrics are, with its labels)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from cortex import metrics
from cortex.routing.pool import NeuronPool
from neuraxis.core.protomaps import generation_name

router = APIRouter()


@router.get("/metrics")
async def prometheus_metrics() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)


@router.get("/sd/neurons")
async def neuron_targets(request: Request) -> list[dict[str, Any]]:
    """One target group per neuron that has answered and exports metrics."""
    pool: NeuronPool = request.app.state.pool
    groups = []
    for address, info in pool.neurons():
        if info is None or not info.metrics_port:
            continue
        host = address.rpartition(":")[0]
        groups.append(
            {
                "targets": [f"{host}:{info.metrics_port}"],
                "labels": {
                    "replica": address,
                    "model": ",".join(m.id for m in info.models) or "loading",
                    "generation": generation_name(info.generation),
                },
            }
        )
    return groups
