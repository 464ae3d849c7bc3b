"""Two listeners in one server: `Listeners` hands each connection to the
app of the socket it was accepted on (the ASGI scope's `server`, the
connection's local address, which no client header can change), and `bind`
makes those sockets before uvicorn starts, so that a taken port fails the
start at once and port 0 is resolved once. What the admin app serves is
cortex/admin.py's.
"""

from __future__ import annotations

import socket
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send


class Listeners:
    """ASGI: requests accepted on the admin port go to the admin app, every
    other one (and the lifespan) to the API app. `app` is the API app, as
    for uvicorn's own wrappers, so that code looking for it finds it."""

    def __init__(self, app: ASGIApp, admin: ASGIApp, admin_port: int) -> None:
        self.app = app
        self.admin = admin
        self.admin_port = admin_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server: Any = scope.get("server")
        if scope["type"] != "lifespan" and server and server[1] == self.admin_port:
            await self.admin(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: a free one), not yet
    listening (uvicorn listens on it in each process that serves it), and
    inheritable, for the workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As uvicorn binds the API socket: a restart need not wait for the
        # old connections' TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def bound_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])
