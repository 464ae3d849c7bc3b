"""The batched token stream's client (Neuron.Session, issue 29; `[pool]
token_stream = "batched"`): a NeuronClient whose `generate` runs on one
long-lived bidirectional stream per neuron instead of one call per request.

Beside client.py, the only other cortex module that touches grpc. The
stream is opened on the first request and again after it broke; a reader
task (`_Stream._read`) hands each item of the neuron's batched messages to
its request's queue (`Demux`). `generate` keeps the per-request call's
contract, so the pool's attempts (attempts.py) cannot tell the two apart:
the same async iterator of GenerateResponse, the same typed errors (the
neuron's, rebuilt from the code, kind and param it sends as Generate's
status would carry them), UnavailableError for every open request when the
stream breaks (retried before the first token, counted against the neuron
as an unreachable one is), a cancel sent when the caller stops reading, and
DeadlineExceededError once the deadline passed (which the neuron enforces
too, as a call's gRPC timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import grpc

from axon.errors import (
    DEADLINE_MESSAGE,
    DeadlineExceededError,
    NeuraxisError,
    UnavailableError,
    from_grpc,
)
from axon.grpc_limits import check_size
from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc
from cortex.routing.client import UNREACHABLE, Metadata, NeuronClient

log = logging.getLogger("neuraxis.cortex")

# What a request's queue carries: a message of its stream, its error, or
# None for its end.
Delivery = pb.GenerateResponse | NeuraxisError | None


def session_error(error: pb.SessionError) -> NeuraxisError:
    """The typed error a request's error item names (as `from_grpc` rebuilds
    a Generate call's from its status)."""
    return from_grpc(error.code, error.message, error.kind or None, error.param or None)


class Demux:
    """The open requests of one stream and where their items go. Plain
    asyncio: the reader calls `dispatch` and `fail`, `generate` the rest."""

    def __init__(self) -> None:
        self._queues: dict[int, asyncio.Queue[Delivery]] = {}
        self._next_id = 0
        self.failed = False

    def __len__(self) -> int:
        return len(self._queues)

    def open(self) -> tuple[int, asyncio.Queue[Delivery]]:
        """A new request: its id on the stream (never reused) and its queue."""
        self._next_id += 1
        queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._queues[self._next_id] = queue
        return self._next_id, queue

    def forget(self, request_id: int) -> bool:
        """Whether the request was still open (so the neuron may still be
        generating for it)."""
        return self._queues.pop(request_id, None) is not None

    def dispatch(self, down: pb.SessionDown) -> None:
        """Each item to its request's queue; a request's last item (error or
        end) closes it. Items of a request that was forgotten (its caller
        left) are dropped."""
        for item in down.items:
            queue = self._queues.get(item.id)
            if queue is None:
                continue
            kind = item.WhichOneof("kind")
            if kind == "response":
                queue.put_nowait(item.response)
            elif kind == "error":
                del self._queues[item.id]
                queue.put_nowait(session_error(item.error))
            else:
                del self._queues[item.id]
                queue.put_nowait(None)

    def fail(self, error: Callable[[], NeuraxisError]) -> None:
        """The stream broke: every open request gets its own `error()`."""
        self.failed = True
        queues, self._queues = self._queues, {}
        for queue in queues.values():
            queue.put_nowait(error())


class _Stream:
    """One Session call: its upstream queue, its reader, its requests."""

    def __init__(self, stub: pb_grpc.NeuronStub, address: str) -> None:
        self.demux = Demux()
        self._address = address
        self._up: asyncio.Queue[pb.SessionUp | None] = asyncio.Queue()
        self._call = stub.Session(self._upstream())
        self._reader = asyncio.create_task(self._read())

    @property
    def alive(self) -> bool:
        return not self.demux.failed

    async def _upstream(self) -> AsyncIterator[pb.SessionUp]:
        while (message := await self._up.get()) is not None:
            yield message

    async def _read(self) -> None:
        why = "ended by the neuron"
        try:
            async for down in self._call:
                self.demux.dispatch(down)
        except grpc.aio.AioRpcError as e:
            why = f"{e.code().name}: {e.details()}"
        except asyncio.CancelledError:
            why = "closed"
            raise
        finally:
            if len(self.demux):
                log.warning(
                    "neuron %s: token stream %s with %d requests open",
                    self._address,
                    why,
                    len(self.demux),
                )
            self.demux.fail(lambda: UnavailableError(UNREACHABLE))

    def start(
        self, request: pb.GenerateRequest, timeout: float, metadata: Metadata
    ) -> tuple[int, asyncio.Queue[Delivery]]:
        request_id, queue = self.demux.open()
        start = pb.SessionStart(
            id=request_id, request=request, timeout_s=timeout, metadata=dict(metadata)
        )
        try:
            check_size(start.ByteSize())  # one message too large would break the stream
        except NeuraxisError:
            self.demux.forget(request_id)
            raise
        self._up.put_nowait(pb.SessionUp(start=start))
        return request_id, queue

    def cancel(self, request_id: int) -> None:
        """The caller left before its request ended: the neuron aborts it."""
        if self.demux.forget(request_id) and self.alive:
            self._up.put_nowait(pb.SessionUp(cancel=pb.SessionCancel(id=request_id)))

    async def close(self) -> None:
        self._up.put_nowait(None)
        self._call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class SessionClient(NeuronClient):
    """NeuronClient with `generate` over the neuron's Session stream; every
    other call (Info, Load, Embed, ...) as NeuronClient makes it."""

    def __init__(self, address: str, credentials: grpc.ChannelCredentials | None = None) -> None:
        super().__init__(address, credentials)
        self._stream: _Stream | None = None

    def _open_stream(self) -> _Stream:
        # Opened in the running loop on first use, as the channel is; a
        # broken stream is replaced by the next request.
        if self._stream is None or not self._stream.alive:
            self._stream = _Stream(self._stub, self.address)
        return self._stream

    async def generate(
        self, request: pb.GenerateRequest, timeout: float, metadata: Metadata = ()
    ) -> AsyncGenerator[pb.GenerateResponse, None]:
        stream = self._open_stream()
        request_id, queue = stream.start(request, timeout, metadata)
        # One timer a request, not one a message: past the deadline the
        # request's queue gets the error the per-request call would raise.
        loop = asyncio.get_running_loop()
        timer = loop.call_later(timeout, queue.put_nowait, DeadlineExceededError(DEADLINE_MESSAGE))
        try:
            while True:
                delivery = await queue.get()
                if isinstance(delivery, pb.GenerateResponse):
                    self._unreachable = False
                    yield delivery
                elif delivery is None:
                    return
                else:
                    raise delivery
        finally:
            timer.cancel()
            # A no-op when the neuron ended the request; otherwise the caller
            # went away (or its deadline passed) and the neuron must stop.
            stream.cancel(request_id)

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.close()
        await super().close()
