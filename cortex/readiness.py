"""When cortex tells systemd it is ready, and the watchdog of its event loop.

cortex is ready (READY=1 under `Type=notify`) once it can do its job: it
listens, its Responses store is open and, in cluster mode, it has received
an endpoint table from the controller. Until then systemd holds back units
ordered after it and `systemctl start` waits. With `WatchdogSec=` the event
loop pings systemd every half period; a loop blocked for longer gets the
service killed and restarted instead of hanging with its port open.

Under `neuraxis up`, in tests and with no NOTIFY_SOCKET, every notification
is a no-op (axon/sdnotify.py).
"""

from __future__ import annotations

import asyncio
import logging

from axon.sdnotify import notify, watchdog_interval_s

log = logging.getLogger("neuraxis.cortex")


class Readiness:
    """The conditions of READY=1, each an event set by whoever knows it."""

    def __init__(self, needs_table: bool) -> None:
        self.listening = asyncio.Event()  # the socket is bound (uvicorn)
        self.store_open = asyncio.Event()  # the store answered (lifespan)
        self.table = asyncio.Event()  # a first endpoint table (cluster mode)
        if not needs_table:
            self.table.set()

    async def announce(self) -> None:
        """Wait for every condition, then tell systemd."""
        for event in (self.listening, self.store_open, self.table):
            await event.wait()
        if notify("READY=1", "STATUS=serving"):
            log.info("told systemd: ready")


async def watchdog(interval_s: float | None = None) -> None:
    """Ping systemd's watchdog from the event loop for as long as it runs:
    a ping that does not come means the loop is stuck."""
    interval = interval_s if interval_s is not None else watchdog_interval_s(parent_ok=True)
    if interval is None:
        return
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval)
