"""A TCP fault proxy of our own, put between cortex and a neuron by the
fault tests (tests/faults/) and the soak (bench/soak.py): it forwards both
ways, and its mode can be switched at any moment, for the connections open
then and those made later:

- `pass`: forward as is;
- `delay`: hold every chunk `delay_s` before forwarding it;
- `reset`: reset (RST, not FIN) every connection, and each new one at once;
- `blackhole`: keep the connections and read from them, forward nothing;
- `drip`: forward `drip_bytes` every `drip_every_s`.

It runs its own event loop on a thread, so that tests and benchmarks drive
it from plain code: `with FaultProxy(upstream_port) as proxy: proxy.mode = ...`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Literal

Mode = Literal["pass", "delay", "reset", "blackhole", "drip"]
MODES: tuple[Mode, ...] = ("pass", "delay", "reset", "blackhole", "drip")


class FaultProxy:
    def __init__(
        self,
        upstream_port: int,
        *,
        delay_s: float = 0.3,
        drip_bytes: int = 64,
        drip_every_s: float = 0.1,
    ) -> None:
        self.upstream_port = upstream_port
        self.delay_s, self.drip_bytes, self.drip_every_s = delay_s, drip_bytes, drip_every_s
        self._mode: Mode = "pass"
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()  # one per connection
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        serving = asyncio.start_server(self._accept, "127.0.0.1", 0)
        self._server = asyncio.run_coroutine_threadsafe(serving, self._loop).result(10)
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        self._mode = mode
        if mode == "reset":
            self._loop.call_soon_threadsafe(self._reset_all)

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            self._reset_all()
            for handler in self._handlers:
                handler.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- on the proxy's loop ---------------------------------------------

    def _reset_all(self) -> None:
        for writer in list(self._writers):
            _reset(writer)
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            await self._proxy(reader, writer)
        finally:
            self._handlers.discard(handler)

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._mode == "reset":
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            _reset(writer)  # nothing listens upstream: as a dead host's port would
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                await self._forward(data, writer)
        if not writer.is_closing():
            writer.close()

    async def _forward(self, data: bytes, writer: asyncio.StreamWriter) -> None:
        mode = self._mode
        if mode == "blackhole":
            return
        if mode == "delay":
            await asyncio.sleep(self.delay_s)
        if mode == "drip":
            # The mode is read again for each piece: a drip cleared while a
            # chunk read during it is dripping sends the rest at once (a
            # 64 KiB chunk would otherwise drip on for 100 s after the fault).
            while data and self._mode == "drip":
                writer.write(data[: self.drip_bytes])
                data = data[self.drip_bytes :]
                await writer.drain()
                await asyncio.sleep(self.drip_every_s)
            if data:
                await self._forward(data, writer)  # the rest, as the mode now says
            return
        writer.write(data)
        await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST: SO_LINGER on, zero seconds."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@contextlib.contextmanager
def proxies(upstream_ports: list[int]) -> Iterator[list[FaultProxy]]:
    """One proxy in front of each port, closed at the end."""
    made: list[FaultProxy] = []
    try:
        for port in upstream_ports:
            made.append(FaultProxy(port))
        yield made
    finally:
        for proxy in made:
            proxy.close()
