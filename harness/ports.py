"""Free TCP ports on 127.0.0.1 for the processes tests and benchmarks start.

The port is free when asked; a process told to listen on it binds it a
moment later. In that moment anything that takes ports from the kernel's
ephemeral range can take it: the source port of any outgoing connection,
and every port Ray binds with 0 (a cortex of bench.routing found its port
taken in one make test run). So ports come from below that range and above
Ray's worker ports (10002-19999 by default), chosen at random and checked
free.

Two more takers of a port not yet bound, both seen in make test runs:
- this process itself: a fleet's sim neurons are given their ports before
  any binds one, and cortex, given one of them too, found /readyz answered
  by a neuron's metrics listener. So a port given is not given again until
  every other one has been;
- the other lane: each lane of harness.lanes draws from its own share of
  the range (`PORTS_ENV`), which its benchmarks' processes inherit.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from collections.abc import Sequence

# Below the kernel's ephemeral ports (32768-60999 on Linux by default: see
# /proc/sys/net/ipv4/ip_local_port_range) and above Ray's worker ports.
ALL_PORTS = range(20000, 32768)

# "LOW-HIGH" (both included): the share of ALL_PORTS this process and its
# children draw from; unset, all of them.
PORTS_ENV = "NEURAXIS_TEST_PORTS"


def share(index: int, count: int) -> str:
    """The `index`th of `count` equal shares of ALL_PORTS, as PORTS_ENV
    takes it."""
    size = len(ALL_PORTS) // count
    low = ALL_PORTS.start + index * size
    return f"{low}-{low + size - 1}"


def _ports() -> Sequence[int]:
    value = os.environ.get(PORTS_ENV)
    if not value:
        return ALL_PORTS
    low, high = (int(part) for part in value.split("-"))
    return range(low, high + 1)


PORTS: Sequence[int] = _ports()

_given: set[int] = set()
_lock = threading.Lock()


def free_port() -> int:
    """A TCP port nothing on 127.0.0.1 listens on now, and none this
    process was given lately."""
    with _lock:
        while True:
            choices = [p for p in PORTS if p not in _given]
            if not choices:
                _given.clear()  # every one given: the earliest are long bound or gone
                continue
            port = random.choice(choices)
            _given.add(port)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
