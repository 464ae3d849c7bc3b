"""A gRPC client for one neuron, speaking neuraxis's own types and errors.

The only cortex module that touches grpc: it turns a failed call into the
typed error the neuron raised (or UnavailableError when the neuron could not
be reached), and cancels the call when its caller stops reading, which
aborts the request in the neuron's engine. `NeuronConnection` is the
interface the pool uses, so that its tests can put an in-memory neuron behind it.
With channel credentials (`channel_credentials`, mutual TLS) every call, Info
polls and health checks included, goes over TLS.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Protocol, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from axon.errors import (
    ERROR_METADATA_KEY,
    PARAM_METADATA_KEY,
    NeuraxisError,
    UnavailableError,
    from_grpc,
)
from axon.grpc_limits import MESSAGE_OPTIONS
from axon.tls import NEURON_SERVER_NAME, TlsFiles
from axon.v1 import neuron_pb2 as pb
from axon.v1 import neuron_pb2_grpc as pb_grpc

R = TypeVar("R")
# A call's gRPC metadata (the trace context the neuron continues).
Metadata = tuple[tuple[str, str], ...]

_CHANNEL_OPTIONS = [
    # Notice a neuron that vanished without closing its connection.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect quickly after a neuron restarts.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    # Requests up to cortex's body limit and a stored chain (grpc_limits).
    *MESSAGE_OPTIONS,
]

# Over TLS the neuron's certificate is checked for this name, not for the
# address dialled (axon/tls.py says why).
_TLS_OPTIONS = [("grpc.ssl_target_name_override", NEURON_SERVER_NAME)]

log = logging.getLogger("neuraxis.cortex")

# What a client is told when a neuron cannot be reached: its address, like
# every internal address, stays in the log (error hygiene, docs/security.md).
UNREACHABLE = "A neuron serving this model could not be reached; try again shortly."


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Mutual TLS: trust neurons whose certificate chains to the CA, and show
    cortex's certificate to them."""
    material = files.read()
    return grpc.ssl_channel_credentials(
        root_certificates=material.ca, private_key=material.key, certificate_chain=material.cert
    )


class NeuronConnection(Protocol):
    """What the pool needs of a neuron: NeuronClient over gRPC, or a test's
    in-memory fake. Failures are raised as neuraxis's typed errors."""

    address: str

    async def info(self, timeout: float) -> pb.InfoResponse: ...
    async def embed(
        self, request: pb.EmbedRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.EmbedResponse: ...
    async def load(self, timeout: float) -> pb.LoadResponse: ...
    async def tokenize(
        self, request: pb.TokenizeRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.TokenizeResponse: ...
    async def detokenize(
        self, request: pb.DetokenizeRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.DetokenizeResponse: ...
    async def serving(self, timeout: float) -> bool: ...
    async def load_adapter(self, adapter_id: str, source: str, timeout: float) -> None: ...
    async def unload_adapter(self, adapter_id: str, timeout: float) -> None: ...
    def generate(
        self, request: pb.GenerateRequest, timeout: float, metadata: Metadata = ()
    ) -> AsyncIterator[pb.GenerateResponse]: ...
    async def close(self) -> None: ...


class NeuronClient:
    def __init__(self, address: str, credentials: grpc.ChannelCredentials | None = None) -> None:
        """`credentials`: None for plaintext, or channel_credentials(...)."""
        self.address = address
        self._credentials = credentials
        self._channel: grpc.aio.Channel | None = None
        self._stub_: pb_grpc.NeuronStub | None = None
        self._health: health_pb2_grpc.HealthStub | None = None
        # Said once when it stops answering, not at every poll of a neuron
        # that is gone (one warning a second until its replica was retired).
        self._unreachable = False

    @property
    def _stub(self) -> pb_grpc.NeuronStub:
        # A grpc.aio channel belongs to the event loop it was made in, so it
        # is made on first use, inside the server's loop.
        if self._stub_ is None:
            self._stub_ = pb_grpc.NeuronStub(self._channel_())  # type: ignore[no-untyped-call]
        return self._stub_

    def _channel_(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = self._open()
        return self._channel

    def _open(self) -> grpc.aio.Channel:
        if self._credentials is None:
            return grpc.aio.insecure_channel(self.address, options=_CHANNEL_OPTIONS)
        return grpc.aio.secure_channel(
            self.address, self._credentials, options=_CHANNEL_OPTIONS + _TLS_OPTIONS
        )

    async def info(self, timeout: float) -> pb.InfoResponse:
        return await self._unary(self._stub.Info(pb.InfoRequest(), timeout=timeout))

    async def embed(
        self, request: pb.EmbedRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.EmbedResponse:
        """`metadata` (here and below): the attempt's trace context, if any."""
        return await self._unary(
            self._stub.Embed(request, timeout=timeout, metadata=metadata or None)
        )

    async def load(self, timeout: float) -> pb.LoadResponse:
        return await self._unary(self._stub.Load(pb.LoadRequest(), timeout=timeout))

    async def tokenize(
        self, request: pb.TokenizeRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.TokenizeResponse:
        return await self._unary(
            self._stub.Tokenize(request, timeout=timeout, metadata=metadata or None)
        )

    async def detokenize(
        self, request: pb.DetokenizeRequest, timeout: float, metadata: Metadata = ()
    ) -> pb.DetokenizeResponse:
        return await self._unary(
            self._stub.Detokenize(request, timeout=timeout, metadata=metadata or None)
        )

    async def load_adapter(self, adapter_id: str, source: str, timeout: float) -> None:
        """Have the neuron serve the LoRA adapter at `source` as `adapter_id`,
        loaded now."""
        request = pb.LoadAdapterRequest(id=adapter_id, source=source)
        await self._unary(self._stub.LoadAdapter(request, timeout=timeout))

    async def unload_adapter(self, adapter_id: str, timeout: float) -> None:
        request = pb.UnloadAdapterRequest(id=adapter_id)
        await self._unary(self._stub.UnloadAdapter(request, timeout=timeout))

    async def _unary(self, call: Awaitable[R]) -> R:
        """A unary call's answer, or its failure as the typed error."""
        try:
            answer = await call
        except grpc.aio.AioRpcError as e:
            raise self._translate(e) from None
        self._unreachable = False
        return answer

    async def serving(self, timeout: float) -> bool:
        """Whether the neuron's grpc.health.v1 check says SERVING."""
        if self._health is None:
            self._health = health_pb2_grpc.HealthStub(self._channel_())
        try:
            response = await self._health.Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return bool(response.status == health_pb2.HealthCheckResponse.SERVING)

    async def generate(
        self, request: pb.GenerateRequest, timeout: float, metadata: Metadata = ()
    ) -> AsyncGenerator[pb.GenerateResponse, None]:
        """`metadata`: the attempt's trace context (axon/tracing.py), if any."""
        call = self._stub.Generate(request, timeout=timeout, metadata=metadata or None)
        try:
            async for response in call:
                self._unreachable = False
                yield response
        except grpc.aio.AioRpcError as e:
            raise self._translate(e) from None
        finally:
            # A no-op when the call has finished; otherwise the caller went
            # away and the neuron must stop generating.
            call.cancel()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()

    def _translate(self, error: grpc.aio.AioRpcError) -> NeuraxisError:
        code = error.code()
        metadata = dict(error.trailing_metadata() or ())
        kind = metadata.get(ERROR_METADATA_KEY)
        if code == grpc.StatusCode.UNAVAILABLE and kind is None:
            level = logging.DEBUG if self._unreachable else logging.WARNING
            log.log(level, "neuron %s is unreachable: %s", self.address, error.details())
            self._unreachable = True
            return UnavailableError(UNREACHABLE)
        param = metadata.get(PARAM_METADATA_KEY)
        return from_grpc(
            code.name,
            error.details() or "",
            str(kind) if kind is not None else None,
            str(param) if param is not None else None,
        )
