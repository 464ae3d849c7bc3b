"""Free TCP ports on 127.0.0.1 for the processes tests and benchmarks start.

The port is free when asked; a process told to listen on it binds it a
moment later. Nothing else on the machine takes ports this way, so the
window does not matter in practice.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port nothing on 127.0.0.1 listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
