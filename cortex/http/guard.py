"""Slow and abusive clients, dealt with where the HTTP bytes are parsed
(uvicorn's httptools protocol), before any ASGI code runs:

- a deadline for the request head: a connection must send its request line
  and headers within `request_header_timeout_s` of connecting (or, on a
  kept-alive connection, of the next request's first byte). A client that
  trickles its headers (slowloris) or connects and sends nothing would
  otherwise hold a connection and its memory for ever: uvicorn's only
  timer is the keep-alive one, armed after a response;
- a deadline for the body: `request_body_timeout_s` from the end of the
  head to the end of the body;
- limits on the head: `max_header_count` headers and `max_header_bytes`
  for the request line and headers together (httptools sets none);
- a deadline for sending: once more of an answer waits in the transport
  than its high-water mark, the client must read some of it
  (`MIN_SEND_PROGRESS`) within `send_timeout_s`, again and again until it
  is sent. uvicorn has no write timeout: a client that never reads held
  its whole answer (125 MiB from a 7.8 MiB `echo` request) in cortex's
  memory, and a stream it stopped reading held its engine slot until the
  600 s total deadline. Past the deadline the connection is dropped (an
  abort: what waits is discarded) and the handler sees the client leave,
  which cancels a stream.

Past the head or body deadline the client gets 408 `request_timeout` (a connection that
sent nothing is just closed), past a limit 431 `headers_too_large`, both in
the OpenAI error envelope, and the connection is closed. The handler of a
request whose body timed out sees the client leave (`http.disconnect`),
as for any client that goes away.

The close lingers (nginx's lingering_close): after the answer, cortex
shuts its side for writing and reads and drops what the client still
sends, for up to `LINGER_S`, before closing. A client refused mid-body is
usually still sending, and closing a socket with unread input makes the
kernel answer with a reset, which destroys the answer in the client's
receive buffer before it is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import struct
import termios
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from axon.errors import (
    HeadersTooLargeError,
    NeuraxisError,
    RequestTimeoutError,
    mapping_for,
)
from cortex.http.errors import error_envelope
from cortex.routing.timer import Timer

log = logging.getLogger("neuraxis.cortex")

# How long a refused connection is read (and dropped) after its answer.
LINGER_S = 2.0
# What a client must read of its answer in each send deadline to keep its
# connection (2 KiB/s at 30 s). A client that reads nothing still takes a
# few KiB: what its kernel's receive buffer holds.
MIN_SEND_PROGRESS = 64 * 1024

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


@dataclass(frozen=True)
class ClientLimits:
    header_timeout_s: float
    body_timeout_s: float
    max_header_count: int
    max_header_bytes: int
    send_timeout_s: float


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and head limits above.
    uvicorn makes one per connection; `limits` is bound with functools.partial
    (picklable, so `--workers N` get it too)."""

    def __init__(self, *args: Any, limits: ClientLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._timer = Timer(self.loop)  # the head's or the body's deadline
        self._head_started = False  # a byte of the current request's head arrived
        self._head_bytes = 0
        self._header_count = 0
        self._lingering = False  # refused: the answer is sent, input is dropped
        self._send_timer = Timer(self.loop)
        self._unsent = 0  # bytes waiting in the transport when the send deadline was armed

    # --- the deadlines ----------------------------------------------------

    def _arm(self, seconds: float, on_expiry: Callable[[], None]) -> None:
        self._timer.arm(seconds, functools.partial(self._expired, on_expiry))

    def _expired(self, on_expiry: Callable[[], None]) -> None:
        if not self.transport.is_closing():  # nothing to answer on a closing connection
            on_expiry()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._limits.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        self._send_timer.cancel()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        if not self._head_started:
            self.transport.close()  # nothing sent: nothing to answer
            return
        log.warning("closed a connection from %s: request head not received in time", self.client)
        self._refuse(
            RequestTimeoutError(
                f"The request's headers did not arrive within "
                f"{self._limits.header_timeout_s:g} seconds."
            )
        )

    def _body_timed_out(self) -> None:
        log.warning("closed a connection from %s: request body not received in time", self.client)
        if self.cycle is not None and not self.cycle.response_started:
            self._refuse(
                RequestTimeoutError(
                    f"The request's body did not arrive within "
                    f"{self._limits.body_timeout_s:g} seconds."
                )
            )
        else:  # the app already answered: nothing more can be said
            self.transport.close()

    # --- the send deadline ------------------------------------------------

    def pause_writing(self) -> None:
        """The transport holds more than its high-water mark: the client must
        read some of it within the deadline."""
        super().pause_writing()
        if not self._send_timer.armed:
            self._arm_send_deadline()

    def resume_writing(self) -> None:
        self._send_timer.cancel()
        super().resume_writing()

    def _arm_send_deadline(self) -> None:
        self._unsent = self._unacknowledged()
        self._send_timer.arm(self._limits.send_timeout_s, self._send_deadline_passed)

    def _unacknowledged(self) -> int:
        """Bytes the client has not received: in the transport's buffer and in
        the kernel's send queue. The kernel keeps taking bytes from the
        transport until its own (growing) send buffer is full, so the
        transport's buffer alone shrinks for a while though the client reads
        nothing."""
        pending = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not Linux: the transport's alone
                queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
                pending += struct.unpack("i", queued)[0]
        return pending

    def _send_deadline_passed(self) -> None:
        # A closing transport counts too: uvicorn closes an idle kept-alive
        # connection after 5 s, and a close waits for the buffer to be sent.
        unsent = self._unacknowledged()
        if self._unsent - unsent >= MIN_SEND_PROGRESS:  # it reads, slowly: another period
            self._arm_send_deadline()
            return
        log.warning(
            "dropped a connection from %s: its client read none of its answer in %g s "
            "(%d bytes waiting)",
            self.client,
            self._limits.send_timeout_s,
            unsent,
        )
        self.transport.abort()

    # --- parser callbacks -------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        self._head_bytes = 0
        self._header_count = 0
        if not self._timer.armed:  # a later request on a kept-alive connection
            self._arm(self._limits.header_timeout_s, self._head_timed_out)

    def on_url(self, url: bytes) -> None:
        self._count(len(url), 0)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value), 1)
        super().on_header(name, value)

    def _count(self, size: int, headers: int) -> None:
        self._head_bytes += size
        self._header_count += headers
        if self._header_count > self._limits.max_header_count:
            raise HeadersTooLargeError(
                f"The request has more than {self._limits.max_header_count} headers."
            )
        if self._head_bytes > self._limits.max_header_bytes:
            raise HeadersTooLargeError(
                f"The request's line and headers exceed {self._limits.max_header_bytes} bytes."
            )

    def on_headers_complete(self) -> None:
        self._timer.cancel()
        self._head_started = False
        super().on_headers_complete()
        if self._has_body():
            self._arm(self._limits.body_timeout_s, self._body_timed_out)

    def on_message_complete(self) -> None:
        self._timer.cancel()
        super().on_message_complete()

    def _has_body(self) -> bool:
        for name, value in self.headers:
            if name == b"content-length":
                return value.strip() != b"0"
            if name == b"transfer-encoding":
                return True
        return False

    # --- refusing ---------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        # uvicorn's, except that a head past the limits gets its 431 rather
        # than the generic 400 (httptools wraps what a callback raised).
        if self._lingering:
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            if isinstance(e.__context__, HeadersTooLargeError):
                self._refuse(e.__context__)
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    def _refuse(self, error: NeuraxisError) -> None:
        """Answer `error` in the envelope and close the connection; the
        request's handler, if one runs, sees the client leave."""
        self._timer.cancel()
        status = mapping_for(error).http_status
        body = error_envelope(error).model_dump_json().encode()
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
        defaults = self.server_state.default_headers  # date, server
        head += [name + b": " + value + b"\r\n" for name, value in defaults]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        if self.cycle is not None and not self.cycle.response_complete:
            # Nothing the handler sends later may follow ours on the wire.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.write(b"".join(head) + body)
        self._linger()

    def _linger(self) -> None:
        """Half-close after the answer and drop input until the client
        closes or `LINGER_S` passes (see the module's docstring)."""
        self._lingering = True
        self.transport.resume_reading()  # uvicorn pauses it when a body backs up
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()  # sent once the answer is flushed
        self._timer.arm(LINGER_S, self.transport.close)
