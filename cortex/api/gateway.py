"""What the API layer may use of the rest of cortex, typed, built once by
`create_app`: the neurons behind it (`Neurons`, the pool's methods the
handlers call), the request caps, the rate limiter, the Responses store and
each tenant's quota of it, the runs of this process, the recorder of
request metrics, the tenants' policies, the usage ledger and, in cluster
mode, the controller's adapter changes. Handlers reach it
through `gateway_of(request)`, and nothing else of the app's state; tests
hand `create_app` any object with the `Neurons` methods.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from fastapi import FastAPI, Request

from axon.v1 import neuron_pb2 as pb
from cortex.api.batches.settings import FilesSettings
from cortex.api.caps import RequestCaps
from cortex.auth.authenticator import Authenticator
from cortex.auth.limiter import Limiter
from cortex.http.context import context_of
from cortex.recording import Recorder
from cortex.routing.policy import RouteHints
from cortex.routing.tenant_policy import FixedTenantPolicies, TenantPolicies
from cortex.schemas.adapters import AdapterCard
from cortex.store.base import ResponseStore
from cortex.store.batches import BatchStore
from cortex.store.ledger import Ledger
from cortex.store.quota import StoreQuota

if TYPE_CHECKING:
    from cortex.api.responses.run import Registry


class Neurons(Protocol):
    """The neurons as the API sees them (cortex/routing/pool.py's NeuronPool)."""

    def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None = None
    ) -> AsyncIterator[pb.GenerateResponse]: ...

    async def embed(
        self, request: pb.EmbedRequest, hints: RouteHints | None = None
    ) -> pb.EmbedResponse: ...

    async def tokenize(
        self, request: pb.TokenizeRequest, hints: RouteHints | None = None
    ) -> pb.TokenizeResponse: ...

    async def detokenize(
        self, request: pb.DetokenizeRequest, hints: RouteHints | None = None
    ) -> pb.DetokenizeResponse: ...

    def served_models(self) -> dict[str, pb.ModelInfo]: ...

    def missing_models(self) -> list[str]:
        """Configured models no ready neuron serves yet (readiness)."""

    def sleeping_models(self) -> dict[str, bool]:
        """Models scaled to zero, each with whether a request wakes it now."""

    def check_task(self, model: str, task: pb.ModelTask, endpoint: str) -> None:
        """A 400 for a model that cannot serve `endpoint` (a chat model asked to embed)."""

    def model_label(self, model: str) -> str:
        """`model` as a metric label: a served or configured id, else "unknown"."""

    def neurons(self) -> list[tuple[str, pb.InfoResponse | None]]:
        """Each neuron's address and what it last said of itself (None: nothing yet)."""

    async def add_adapter(self, model: str, adapter_id: str, source: str) -> list[str]:
        """A LoRA adapter served on every ready replica of `model` from now on."""

    async def remove_adapter(self, adapter_id: str) -> list[str]:
        """A LoRA adapter served no more."""


class AdapterControl(Protocol):
    """Where the admin listener's adapter changes go in cluster mode: the
    controller (cortex/cluster/client.py), which keeps them in its
    spec, so that the replicas it starts later serve them too. Each change
    answers the addresses of the replicas told now, or raises the refusal;
    `listing` is every adapter the controller serves, replicas by address."""

    async def add(self, model: str, adapter_id: str, source: str) -> list[str]: ...

    async def remove(self, adapter_id: str) -> list[str]: ...

    async def listing(self) -> list[AdapterCard]: ...


@dataclass
class Runs:
    """The Responses this process runs, by id: background ones (for cancel)
    and stored streams (for delete); `instance` is the name under which this
    process (each worker its own: host:port/pid) owns them in a shared store."""

    instance: str
    lease_s: float
    background: Registry = field(default_factory=dict)
    streaming: Registry = field(default_factory=dict)
    # The tenants of background responses admitted and not yet in
    # `background` (being routed and stored): they count toward the cap.
    starting: list[str] = field(default_factory=list)

    def background_tenants(self) -> list[str]:
        """A tenant per background response running or starting here."""
        return [*(run.tenant for run in self.background.values()), *self.starting]


@dataclass(frozen=True)
class Gateway:
    neurons: Neurons
    caps: RequestCaps
    store: ResponseStore
    runs: Runs
    recorder: Recorder
    quota: StoreQuota | None = None  # None: no tenant's store share is capped
    authenticator: Authenticator | None = None  # None: auth off
    limiter: Limiter | None = None  # None: no key has limits (auth off)
    # The tenants' weights, classes and limits (the store's, refreshed in
    # the background: cortex/auth/tenant_policies.py), for admission.
    tenant_policies: TenantPolicies = field(default_factory=FixedTenantPolicies)
    ledger: Ledger | None = None  # None: [tenancy] ledger = false
    tenant_tokens: bool = False  # metrics_tenant_label: token counters per tenant
    batches: BatchStore | None = None  # the Files and Batches store (None: not served)
    files: FilesSettings = field(default_factory=FilesSettings)
    # Cluster mode: adapters are added and removed through the controller
    # (None: on the neurons directly, `neurons.add_adapter`).
    adapters: AdapterControl | None = None


def gateway_of_app(app: FastAPI) -> Gateway:
    gateway: Gateway = app.state.gateway
    return gateway


def gateway_of(request: Request) -> Gateway:
    return gateway_of_app(request.app)


async def authenticate(request: Request) -> None:
    """What every `/v1/...` route does first, from the headers alone
    (cortex/api/route.py): the caller's principal into the request's context
    (none with auth off: the anonymous one stays), and a 429 for a key
    already at its request rate or concurrency."""
    gateway = gateway_of(request)
    if gateway.authenticator is None:
        return
    header = request.headers.get("authorization")
    principal = await gateway.authenticator.principal(header)
    context_of(request).principal = principal
    if gateway.limiter is not None and gateway.limiter.applies(principal):
        await gateway.limiter.check(principal)
