"""`neuraxis cortex`: serve the gateway with uvicorn, in one process or in
several workers whose metrics are added up (prometheus_client's
multiprocess mode), on two sockets: the API's and the admin listener's
(cortex/admin.py).

On SIGTERM or Ctrl-C uvicorn stops accepting connections and gives the open
ones `shutdown_grace_s` to finish; a few seconds before that runs out, the streams
still open are ended with their terminal events (cortex/shutdown.py), so
that none is cut off mid-frame and no traceback reaches the log. uvicorn's
own loggers go through neuraxis's handler, in the configured format.
"""

from __future__ import annotations

import asyncio
import faulthandler
import functools
import logging
import os
import signal
import socket
import sys
import tempfile
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from axon.logs import configure_logging
from axon.tls import allowed_plaintext
from cortex.admin import with_admin
from cortex.auth.exposure import exposure_problem
from cortex.config import CortexSettings
from cortex.http.guard import ClientLimits, GuardedHttpProtocol
from cortex.http.listeners import bind, bound_port
from cortex.notify_relay import NotifyRelay
from cortex.shutdown import CUTOFF, Cutoff

log = logging.getLogger("neuraxis.cortex")

_SETTINGS_ENV = "NEURAXIS_CORTEX_SETTINGS_JSON"
# How much of the graceful shutdown is kept for ending the streams still open
# with their terminal events (at most half of it).
CUT_MARGIN_S = 3.0


def run(settings: CortexSettings) -> int:
    # A stuck event loop killed by systemd's watchdog (SIGABRT) leaves every
    # thread's stack in the log.
    faulthandler.enable()
    problem = exposure_problem(
        settings.host, settings.auth.mode, settings.auth.allow_unauthenticated
    )
    if problem is not None:
        print(f"neuraxis cortex: {problem}", file=sys.stderr)
        return 2
    if settings.cluster_mode:
        # Ray sets up its loggers when it is first imported; imported before
        # the logging set-up, they are routed through neuraxis's handler.
        import cortex.cluster.client  # noqa: F401
    configure_logging(settings.log_format, settings.log_level)
    link = "the link to the neurons"
    if settings.tls is None and not allowed_plaintext(
        log, "cortex", link, settings.plaintext, settings.neuron_hosts
    ):
        return 2
    if not settings.ray.head:
        return _serve(settings)
    # The head host's service: a Ray head beside cortex, stopped with it.
    from axon.process import stop_process_group
    from cortex.cluster.head import start_head, wait_for_head

    ray = settings.ray
    address = f"{ray.node_ip}:{ray.port}"
    head = start_head(ray.port, ray.node_ip, fixed_ports=ray.fixed_ports)
    # uvicorn re-raises the SIGTERM it shut down for once it has restored the
    # previous handler: with this one, that unwinds to the `finally` below
    # instead of killing the process before it stops the head.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        wait_for_head(address, head)
        return _serve(
            settings.model_copy(
                update={"ray": ray.model_copy(update={"head": False, "address": address})}
            )
        )
    finally:
        if head.poll() is None:
            # The cluster ends with its head: the replicas drain first.
            from cortex.cluster.client import drain_cluster

            drain_cluster(address)
        stop_process_group(head, timeout_s=30)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


class Server(uvicorn.Server):
    """uvicorn's server, whose graceful shutdown ends the streams still open
    `cut_margin_s` before its timeout instead of cancelling them at it."""

    def __init__(
        self, config: uvicorn.Config, cutoff: Cutoff = CUTOFF, cut_margin_s: float = CUT_MARGIN_S
    ) -> None:
        super().__init__(config)
        self._cutoff = cutoff
        self._cut_margin_s = min(cut_margin_s, (config.timeout_graceful_shutdown or 0) / 2)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            _listening(self.config.loaded_app)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        grace = self.config.timeout_graceful_shutdown or 0
        timer = asyncio.get_running_loop().call_later(
            max(grace - self._cut_margin_s, 0.0), self._cut_streams
        )
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()

    def _cut_streams(self) -> None:
        ended = self._cutoff.cut()
        if ended:
            log.warning(
                "shutting down: ended %d open request(s) with an error (unavailable)", ended
            )


class _QuietCancel(logging.Filter):
    """uvicorn logs a request task it cancelled at the end of its graceful
    timeout as an "Exception in ASGI application" with a CancelledError
    traceback. Should that still happen (a request the cutoff cannot end,
    such as an upload that never finishes), one warning line says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError):
            record.msg, record.args = "a request was cancelled by the shutdown", None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def _options(settings: CortexSettings) -> dict[str, Any]:
    uvicorn_error = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _QuietCancel) for f in uvicorn_error.filters):
        uvicorn_error.addFilter(_QuietCancel())
    return {
        "loop": "uvloop",
        # httptools, with read deadlines and header limits (cortex/http/guard.py).
        "http": functools.partial(GuardedHttpProtocol, limits=client_limits(settings)),
        # Our handler, our format: uvicorn's dictConfig would install its own.
        "log_config": None,
        # Its start-up lines say what ours say; its warnings and errors stay.
        "log_level": "warning",
        # One log line per request already comes from cortex.metrics.
        "access_log": False,
        "timeout_graceful_shutdown": settings.shutdown_grace_s,
    }


def _serve(settings: CortexSettings) -> int:
    sockets = _bind_listeners(settings)
    if sockets is None:
        return 1
    admin_port = bound_port(sockets[1])
    log.info(
        "admin listener on http://%s:%d (/metrics, /sd/neurons)", settings.admin.host, admin_port
    )
    where: dict[str, Any] = {"host": settings.host, "port": settings.port}
    if settings.worker_count > 1:
        # Must be set before any worker imports prometheus_client's metrics.
        os.environ.setdefault(
            "PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="neuraxis-metrics-")
        )
        # The workers dispatch on the port bound here, not on a 0 asked for.
        os.environ[_SETTINGS_ENV] = settings.model_copy(
            update={"admin": settings.admin.model_copy(update={"port": admin_port})}
        ).model_dump_json()
        relay = None
        if target := os.environ.get("NOTIFY_SOCKET"):
            relay = NotifyRelay(target)
            relay.start()
            os.environ["NOTIFY_SOCKET"] = str(relay.path)  # what the workers inherit
        # What uvicorn.run does for workers, with both sockets (it binds only
        # the one it is given a host and port for): each worker accepts on
        # both. uvicorn's supervisor makes each worker's server itself:
        # workers get the quiet cancel, not the cutoff.
        config = uvicorn.Config(
            "cortex.main:app_from_env",
            factory=True,
            workers=settings.worker_count,
            **where,
            **_options(settings),
        )
        try:
            Multiprocess(config, sockets=sockets).run()
        finally:
            if relay is not None:
                relay.close()
        return 0
    from cortex.app import create_app

    app = with_admin(create_app(settings), admin_port)
    Server(uvicorn.Config(app, **where, **_options(settings))).run(sockets=sockets)
    return 0


def _bind_listeners(settings: CortexSettings) -> list[socket.socket] | None:
    """The API socket and the admin socket, bound (None: said why in the log).
    Bound here rather than by uvicorn so that both fail the start alike and
    the admin port is known before the app that dispatches on it exists."""
    bound: list[socket.socket] = []
    for name, host, port in (
        ("API", settings.host, settings.port),
        ("admin", settings.admin.host, settings.admin.port),
    ):
        try:
            bound.append(bind(host, port))
        except OSError as e:
            log.error("cannot listen on %s:%d (%s listener): %s", host, port, name, e)
            break
    else:
        if bound_port(bound[0]) != bound_port(bound[1]):
            return bound
        # Requests are told apart by the port they came in on.
        log.error("the API and admin listeners got the same port on two addresses")
    for sock in bound:
        sock.close()
    return None


def app_from_env() -> Any:
    """The app factory each worker process calls."""
    from cortex.app import create_app

    settings = CortexSettings.model_validate_json(os.environ[_SETTINGS_ENV])
    configure_logging(settings.log_format, settings.log_level)
    _quiet_uvicorn()
    app = with_admin(create_app(settings), settings.admin.port)
    # uvicorn's supervisor bound the socket before it started the workers.
    _listening(app)
    return app


def _quiet_uvicorn() -> None:
    """In a worker, what `_options`' log_level and access_log do in the
    process that builds uvicorn's Config: Config applies them to the
    loggers when it is made, and a spawned worker gets the config without
    making it, so its access log and start-up lines came out."""
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    access = logging.getLogger("uvicorn.access")
    access.handlers = []
    access.propagate = False


def _listening(app: Any) -> None:
    """Tell the app's readiness that its socket is bound. uvicorn may have
    wrapped the app in middleware: find the FastAPI app inside."""
    while app is not None and not hasattr(app, "state"):
        app = getattr(app, "app", None)
    readiness = getattr(getattr(app, "state", None), "readiness", None)
    if readiness is not None:
        readiness.listening.set()


def client_limits(settings: CortexSettings) -> ClientLimits:
    return ClientLimits(
        header_timeout_s=settings.http.header_timeout_s,
        body_timeout_s=settings.http.body_timeout_s,
        send_timeout_s=settings.http.send_timeout_s,
        max_header_count=settings.http.max_header_count,
        max_header_bytes=settings.http.max_header_bytes,
    )
