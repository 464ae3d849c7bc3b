"""GET /metrics (Prometheus exposition) and GET /sd/neurons (Prometheus
HTTP service discovery: where each neuron's metrics are, with its labels)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from axon.protomaps import generation_name
from cortex import metrics
from cortex.api.gateway import Neurons


def router_for(neurons: Neurons) -> APIRouter:
    """The admin routes over `neurons` (the API app's)."""
    router = APIRouter()
    router.add_api_route("/metrics", prometheus_metrics, methods=["GET"])

    @router.get("/sd/neurons")
    async def sd_neurons() -> list[dict[str, Any]]:
        return neuron_targets(neurons)

    return router


async def prometheus_metrics(request: Request) -> Response:
    body, content_type = metrics.exposition(request.headers.get("accept", ""))
    return Response(body, media_type=content_type)


def neuron_targets(neurons: Neurons) -> list[dict[str, Any]]:
    """One target group per neuron that has answered and exports metrics."""
    groups = []
    for address, info in neurons.neurons():
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
