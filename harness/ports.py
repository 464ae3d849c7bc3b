"""Free TCP ports on 127.0.0.1 for the processes tests and benchmarks start.

The port is free when asked; a process told to listen on it binds it a
moment later. In that moment anything that takes ports from the kernel's
ephemeral range can take it: the source port of any outgoing connection,
and every port Ray binds with 0 (a cortex of bench.routing found its port
taken in one make test run). So ports come from below that range and above
Ray's worker ports (10002-19999 by default), chosen at random so that make
test's two lanes rarely ask for the same one, and checked free.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence

# Below the kernel's ephemeral ports (32768-60999 on Linux by default: see
# /proc/sys/net/ipv4/ip_local_port_range) and above Ray's worker ports.
PORTS: Sequence[int] = range(20000, 32768)


def free_port() -> int:
    """A TCP port nothing on 127.0.0.1 listens on now."""
    while True:
        port = random.choice(PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
