"""The FastAPI app factory: builds the pool and the API's `Gateway` (what
the handlers may use), mounts the API routers, error handlers and the edge's
middleware, and runs the pool, store and upkeep with the app; nothing else
lives here."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol

from fastapi import FastAPI

from axon import tracing
from axon.sdnotify import notify
from cortex import metrics
from cortex.api import chat, completions, embeddings, health, models, tokenize
from cortex.api.batches import files_routes
from cortex.api.batches import routes as batches
from cortex.api.batches.line_run import run_line
from cortex.api.batches.runner import BatchRunner
from cortex.api.errors import install_error_handlers
from cortex.api.gateway import AdapterControl, Gateway, Neurons, Runs
from cortex.api.responses import routes as responses
from cortex.api.responses.run import fail_dead_siblings, fail_orphans
from cortex.api.responses.upkeep import Upkeep
from cortex.api.responses.upkeep_settings import UpkeepSettings
from cortex.auth.authenticator import Authenticator
from cortex.auth.limiter import Limiter
from cortex.auth.local_usage import counters_for
from cortex.auth.tenant_policies import StoreTenantPolicies
from cortex.cluster.spec import DeploymentSpec, load_spec
from cortex.config import CortexSettings
from cortex.http import openapi
from cortex.http.body_limit import BodyLimit
from cortex.http.cold_start import ColdStartHeader
from cortex.http.disconnect import CancelOnDisconnect
from cortex.http.ratelimit_headers import RateLimitHeaders
from cortex.http.tracing import TraceRequests
from cortex.readiness import Readiness, watchdog
from cortex.recording import recorder_for
from cortex.routing.client import NeuronClient, channel_credentials
from cortex.routing.pool import NeuronPool
from cortex.routing.session_client import SessionClient
from cortex.routing.tenant_policy import TenantPolicies
from cortex.store.base import ResponseStore
from cortex.store.batch_db import PostgresDb, SqliteDb
from cortex.store.batches import BatchStore
from cortex.store.keys import KeyStore, open_key_store
from cortex.store.ledger import Ledger
from cortex.store.quota import StoreQuota
from cortex.store.sqlite import SqliteResponseStore
from cortex.store.tenants import open_tenant_store

if TYPE_CHECKING:
    # Cluster mode's only (it imports Ray): imported when cortex runs so.
    from cortex.cluster.client import ControllerAdapterControl

# The GIL's switch interval in cortex (why: the lifespan below).
SWITCH_INTERVAL_S = 0.001
log = logging.getLogger("neuraxis.cortex")


class Pool(Neurons, Protocol):
    """The neurons as the app runs them: started and stopped with it."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def make_pool(
    settings: CortexSettings, spec: DeploymentSpec | None, tenants: TenantPolicies | None = None
) -> NeuronPool:
    """The pool of the configured neurons (cluster mode: of the controller's
    table, over the same TLS); admission reads the tenants' weights and
    classes from `tenants` (default: the settings' static tables)."""
    expected = settings.models or (
        [m.id for m in spec.models if m.replicas or m.autoscale] if spec else []
    )
    credentials = channel_credentials(settings.tls) if settings.tls else None
    client = SessionClient if settings.pool.token_stream == "batched" else NeuronClient
    if client is SessionClient:
        log.info("token stream: batched (one Session stream per neuron)")
    pool = NeuronPool(
        [client(address, credentials) for address in settings.neurons],
        client_factory=lambda address: client(address, credentials),
        expected_models=expected,
        deadlines=settings.deadlines,
        settings=settings.pool,
        policy=settings.routing.table(spec.routing() if spec else None),
        ejection=settings.ejection,
        retry_budget=settings.retry_budget,
        admission=settings.admission,
        tenants=tenants,
    )
    if spec is not None:  # models that may scale to zero wait for a wake
        pool.wakes.wakeable = frozenset(
            m.id for m in spec.models if m.autoscale and m.autoscale.min_replicas == 0
        )
        pool.set_adapters(spec.adapters())
    return pool


def create_app(
    settings: CortexSettings,
    pool: Pool | None = None,
    store: ResponseStore | None = None,
    keys: KeyStore | None = None,
) -> FastAPI:
    """Build the app. A pool may be passed in (tests); otherwise one is made
    from the configured neuron addresses and started with the app. With
    `auth = required` the key store is `keys` or the configured store's."""
    spec = (
        load_spec(settings.controller.deployment)
        if settings.cluster_mode and settings.controller.deployment
        else None
    )
    tenants = open_tenant_store(settings.store.state_dir, settings.store.postgres_dsn)
    policies = StoreTenantPolicies(
        tenants, settings.tenancy.refresh_s, settings.admission.static_policies()
    )
    neurons = pool if pool is not None else make_pool(settings, spec, policies)
    # Cluster mode hands the controller's table to the real pool.
    followed = neurons if spec is not None and isinstance(neurons, NeuronPool) else None
    if spec is not None and followed is None:
        raise ValueError("cluster mode follows the controller with a NeuronPool")
    store = store or _store_for(settings)
    readiness = Readiness(needs_table=spec is not None)
    if settings.auth.mode == "required":
        keys = keys or open_key_store(settings.store.state_dir, settings.store.postgres_dsn)
    else:
        keys = None  # one anonymous tenant: no lookups, no limits
    # The switch of the routing, admission and rate-limit metrics (recorded
    # by the pool and the limiter); what the API records goes through the
    # gateway's recorder.
    metrics.configure(settings.metrics_enabled)
    # In each worker process (its exporter's thread is its own).
    tracing.configure("neuraxis-cortex", settings)
    address = f"{socket.gethostname()}:{settings.port}"
    ledger = Ledger(tenants, settings.tenancy.ledger_flush_s) if settings.tenancy.ledger else None
    control = _adapter_control() if spec is not None else None
    gateway = _gateway(
        settings, neurons, store, keys, f"{address}/{os.getpid()}", policies, ledger, control
    )
    runs = gateway.runs
    batch_store = gateway.batches
    assert batch_store is not None
    batch_runner = BatchRunner(
        batch_store,
        lambda endpoint, principal, line: run_line(app, endpoint, principal, line),
        runs.instance,
        settings.batches,
        settings.files,
        purge_claim=store.claim,
        purge_interval_s=settings.responses.purge_interval_s,
    )
    upkeep = Upkeep(
        store,
        runs.instance,
        lambda: [*runs.background.values(), *runs.streaming.values()],
        UpkeepSettings(
            ttl_days=settings.responses.ttl_days,
            purge_interval_s=settings.responses.purge_interval_s,
            lease_s=settings.responses.lease_s,
        ),
        recorder=gateway.recorder,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await neurons.start()
        follower = (
            await _join_cluster(settings, spec, followed, readiness.table, control)
            if spec is not None and followed is not None
            else None
        )
        # Responses this host:port's dead processes were running (and those
        # of an older version, owned by host:port) fail at once; others'
        # when their leases expire (upkeep).
        recorder = gateway.recorder
        orphans = await fail_orphans(store, address, recorder) + await fail_dead_siblings(
            store, runs.instance, recorder
        )
        if orphans:
            log.warning("%d background responses were cut off by a restart: failed", orphans)
        readiness.store_open.set()
        # What exists now (the imports, the app) lives as long as the
        # process: frozen, Python's full garbage collections no longer walk
        # it. They run with the GIL held, so each one paused the event loop
        # for ~100 ms while a large answer was built (cortex/api/answers.py).
        gc.freeze()
        # A worker thread building a large answer or parsing a large body
        # keeps the GIL until the loop's thread has asked for it for one
        # switch interval (5 ms by default), and a request takes the loop
        # several turns: /healthz waited 80-100 ms at p99 beside two such
        # builds. At 1 ms the loop waits a fifth as long; a thread that
        # nobody waits for is not interrupted at all.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        systemd = [asyncio.create_task(readiness.announce()), asyncio.create_task(watchdog())]
        upkeeping = asyncio.create_task(upkeep.forever())
        tenancy = await _start_tenancy(policies, ledger)
        batch_running = asyncio.create_task(batch_runner.forever())
        try:
            yield
        finally:
            notify("STOPPING=1")
            for task in systemd:
                task.cancel()
            upkeeping.cancel()  # before the store closes: its statements finish first
            batch_running.cancel()
            await asyncio.gather(upkeeping, batch_running, return_exceptions=True)
            await batch_runner.stop()  # its leases let go: taken up at once elsewhere
            # Background responses still running end as failed (and stored).
            tasks = [run.task for run in runs.background.values() if run.task]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if follower is not None:
                follower.cancel()
            await neurons.stop()
            await store.close()
            # The ledger's task flushes once more as it ends: after every
            # request has ended, before its store closes.
            for task in tenancy:
                task.cancel()
            await asyncio.gather(*tenancy, return_exceptions=True)
            await tenants.close()
            await batch_store.close()
            if keys is not None:
                assert gateway.limiter is not None
                await gateway.limiter.drain()
                await keys.close()
            tracing.shutdown()  # the last spans exported

    app = FastAPI(title="neuraxis cortex", lifespan=lifespan, docs_url=None, redoc_url=None)
    # What the handlers use (cortex/api/gateway.py); the readiness is the
    # server's (cortex/main.py tells it the socket is bound).
    app.state.gateway = gateway
    app.state.readiness = readiness
    metrics.touch_store(store.backend)
    install_error_handlers(app, gateway.recorder)
    openapi.install(app, auth_required=keys is not None)
    # Who is calling: every /v1 route authenticates from the headers before
    # its body is read (cortex/api/route.py); with auth off it attaches
    # nothing and the anonymous principal applies.
    routers = (chat, completions, embeddings, responses, models, files_routes, batches, tokenize)
    for api in routers:
        app.include_router(api.router)
    # /metrics and /sd/neurons are the admin listener's (cortex/admin.py).
    app.include_router(health.router)
    # Innermost: it watches for the disconnect once the body has been read.
    app.add_middleware(CancelOnDisconnect)
    app.add_middleware(ColdStartHeader)
    if gateway.limiter is not None:
        app.add_middleware(RateLimitHeaders, limiter=gateway.limiter)
    upload = settings.files.max_bytes + files_routes.MULTIPART_OVERHEAD
    app.add_middleware(
        BodyLimit, max_bytes=settings.http.max_body_bytes, paths={"/v1/files": upload}
    )
    if tracing.enabled():  # outermost: the request's span covers the rest
        app.add_middleware(TraceRequests)
    return app


async def _start_tenancy(
    policies: StoreTenantPolicies, ledger: Ledger | None
) -> list[asyncio.Task[None]]:
    """Read the tenants' rows once before serving (the first requests get
    their tenant's policy), then keep them fresh and flush the ledger in
    the background."""
    try:
        await policies.refresh()
    except Exception:
        log.exception("reading the tenants failed; every tenant gets the defaults until it works")
    tasks = [asyncio.create_task(policies.forever())]
    if ledger is not None:
        tasks.append(asyncio.create_task(ledger.forever()))
    return tasks


def _gateway(
    settings: CortexSettings,
    neurons: Neurons,
    store: ResponseStore,
    keys: KeyStore | None,
    instance: str,
    policies: StoreTenantPolicies,
    ledger: Ledger | None,
    adapters: AdapterControl | None,
) -> Gateway:
    authenticator = limiter = None
    if keys is not None:
        authenticator = Authenticator(
            keys, time.time, settings.auth.cache_s, settings.auth.default_limits()
        )
        # A lease outlives the longest generation, then frees its slot.
        counters = counters_for(keys, settings.local_rate_limit_counters)
        limiter = Limiter(
            counters, time.time, lease_s=settings.deadlines.total_s + 60, policies=policies
        )
    return Gateway(
        neurons=neurons,
        caps=settings.caps,
        store=store,
        runs=Runs(instance, lease_s=settings.responses.lease_s),
        recorder=recorder_for(settings.metrics_enabled),
        quota=StoreQuota(store, settings.responses.max_stored_bytes_per_tenant),
        authenticator=authenticator,
        limiter=limiter,
        tenant_policies=policies,
        ledger=ledger,
        tenant_tokens=settings.metrics_enabled and settings.metrics_tenant_label,
        batches=_batch_store_for(settings),
        files=settings.files,
        adapters=adapters,
    )


def _adapter_control() -> ControllerAdapterControl:
    """Cluster mode's adapter changes, through the controller once joined."""
    from cortex.cluster.client import ControllerAdapterControl

    return ControllerAdapterControl()


async def _join_cluster(
    settings: CortexSettings,
    spec: DeploymentSpec,
    pool: NeuronPool,
    received: asyncio.Event,
    adapters: ControllerAdapterControl | None,
) -> asyncio.Task[None]:
    """Join the Ray cluster, start or find the controller with the spec,
    follow its endpoint table and report to it in the background
    (`received` is set once the first table has reached the pool); the
    admin listener's adapter changes go to that controller from then on."""
    from cortex.cluster.client import Followed, connect, ensure_controller, follow_cluster
    from cortex.cluster.controller import ControllerConfig
    from cortex.cluster.plane import ControlPlane
    from cortex.cluster.scaling_follower import ScalingFollower

    assert settings.ray.address is not None
    await asyncio.to_thread(connect, settings.ray.address)
    config = ControllerConfig(
        health_interval_s=settings.controller.health_interval_s,
        start_timeout_s=settings.controller.replica_start_timeout_s,
        tls=settings.tls,
        plaintext=settings.plaintext,
    )
    controller = await asyncio.to_thread(ensure_controller, spec, config)
    if adapters is not None:
        adapters.link = controller
    log.info("cluster mode: following the controller at %s", settings.ray.address)
    scaling = ScalingFollower(
        pool, settings.controller.wake_timeout_s, settings.controller.replica_start_timeout_s
    )
    followed = Followed(
        received=received, plane=ControlPlane(settings.ray.address), scaling=scaling
    )
    return asyncio.create_task(follow_cluster(controller, pool, followed))


def _batch_store_for(settings: CortexSettings) -> BatchStore:
    """Files and batches: beside the responses, in a SQLite file of their
    own (chunks and line results kept apart from the responses' writes) or
    in the same PostgreSQL database."""
    if settings.store.postgres_dsn:
        return BatchStore(PostgresDb(settings.store.postgres_dsn))
    return BatchStore(SqliteDb(settings.store.state_dir / "batches.sqlite3"))


def _store_for(settings: CortexSettings) -> ResponseStore:
    if settings.store.postgres_dsn:
        from cortex.store.postgres import PostgresResponseStore

        return PostgresResponseStore(settings.store.postgres_dsn)
    return SqliteResponseStore(settings.store.state_dir / "responses.sqlite3")
