"""The admin listener: `/metrics`, `/sd/neurons`, `/v1/usage` (the usage
ledger, every tenant's) and `/v1/adapters` (the LoRA adapters, where they
are held, one added or removed at run time; through the controller in
cluster mode) on a socket of their own (`admin_host`:`admin_port`,
loopback by default), so that the API port, which API clients and whatever
fronts them reach, serves `/v1/...`, `/healthz` and `/readyz` only (and the
schema at `/openapi.json`). Metrics, the neurons' addresses and the tenants'
usage are for this host's operators and Prometheus.

One uvicorn server serves both sockets: `Listeners` hands each connection
to the app of the socket it was accepted on (the ASGI scope's `server`, the
connection's local address, which no client header can change). Both
sockets are bound before uvicorn starts (cortex/main.py), so that a taken
port fails the start at once and port 0 is resolved once. With `--workers N`
uvicorn's supervisor passes both to every worker, as it does the API socket
alone, and any worker may answer an admin request: /metrics adds up every
worker's values (prometheus_client's multiprocess mode), and every worker's
pool follows the same neurons, so /sd/neurons is the same whoever answers.
"""

from __future__ import annotations

from fastapi import FastAPI

from cortex.api import adapters, observability, usage
from cortex.api.errors import install_error_handlers
from cortex.api.gateway import AdapterControl, Neurons, gateway_of_app
from cortex.http.listeners import Listeners
from cortex.recording import NoRecorder
from cortex.store.tenants import TenantStore


def create_admin_app(
    neurons: Neurons,
    tenants: TenantStore | None = None,
    adapter_control: AdapterControl | None = None,
) -> FastAPI:
    """The admin routes over the API app's neurons and usage ledger (in
    `tenants`). No lifespan of its own: the API app's starts and stops the
    pool and the store; no schema: not an API."""
    app = FastAPI(title="neuraxis cortex admin", openapi_url=None, docs_url=None, redoc_url=None)
    # An unknown path is a 404 in the envelope here too; no API request
    # comes here to be counted.
    install_error_handlers(app, NoRecorder())
    app.include_router(observability.router_for(neurons))
    app.include_router(usage.router_for(tenants))
    app.include_router(adapters.router_for(neurons, adapter_control))
    return app


def with_admin(api: FastAPI, admin_port: int) -> Listeners:
    """The API app with the admin app on `admin_port` (the bound port)."""
    gateway = gateway_of_app(api)
    tenants = gateway.ledger.store if gateway.ledger else None
    admin = create_admin_app(gateway.neurons, tenants, gateway.adapters)
    return Listeners(api, admin, admin_port)
