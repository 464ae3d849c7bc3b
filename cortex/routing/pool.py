"""The pool: what the rest of cortex routes requests through.

`NeuronPool` puts two parts together behind the methods the API layer, the
admin app and the cluster follower call: the roster (`roster.py`: the
neurons, what each serves and how busy it is, their Info and Load polls,
the endpoint table followed in cluster mode) and the attempts
(`attempts.py`: admission, the routing policy's choice, retries before the
first token, deadlines and outlier ejection, one loop for generate and
embed). Clients are made by a factory and time is read from a clock, both
passed in, so the pool is tested with in-memory neurons.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence

from axon.errors import InvalidRequestError, ModelNotFoundError
from axon.v1 import neuron_pb2 as pb
from cortex.routing.adapter_affinity import AdapterAffinity
from cortex.routing.admission import AdmissionControl, AdmissionOptions, Sleep
from cortex.routing.attempts import Attempts
from cortex.routing.client import NeuronClient, NeuronConnection
from cortex.routing.deadlines import Deadlines
from cortex.routing.ejection import EjectionOptions, OutlierEjection
from cortex.routing.factory import PolicyOptions, PolicyTable
from cortex.routing.policy import RouteHints, RoutingPolicy
from cortex.routing.pool_settings import PoolSettings
from cortex.routing.retry_budget import RetryBudget, RetryBudgetOptions
from cortex.routing.roster import ClientFactory, Roster
from cortex.routing.tenant_policy import TenantPolicies
from cortex.routing.wake import Wakes

# How long a replica may take to load an adapter (vLLM reads its weights).
ADAPTER_LOAD_TIMEOUT_S = 120.0


class NeuronPool:
    def __init__(
        self,
        clients: Sequence[NeuronConnection],
        expected_models: list[str],
        *,
        deadlines: Deadlines,
        settings: PoolSettings | None = None,
        client_factory: ClientFactory = NeuronClient,
        policy: RoutingPolicy | PolicyTable | None = None,
        clock: Callable[[], float] = time.monotonic,
        ejection: EjectionOptions | None = None,
        retry_budget: RetryBudgetOptions | None = None,
        admission: AdmissionOptions | None = None,
        sleep: Sleep = asyncio.sleep,
        tenants: TenantPolicies | None = None,
    ) -> None:
        """`clients` are the static neurons; `client_factory` makes the ones
        the endpoint table adds (`update`). `policy` is one policy for every
        model, or a table of one per model (default: least outstanding).
        The groups are cortex's settings of the same names, each given whole
        to the part that uses it (defaults where left out). `tenants`: the
        tenants' weights and classes admission reads (default: the static
        table of the admission settings)."""
        if isinstance(policy, RoutingPolicy):
            shared = policy
            self._policy_for: Callable[[str], RoutingPolicy] = lambda _model: shared
            options = PolicyOptions()
        else:
            table = policy or PolicyTable()
            self._policy_for = table.for_model
            options = table.options
        settings = settings or PoolSettings()
        admission_options = admission or AdmissionOptions()
        self._roster = Roster(
            clients,
            expected_models,
            client_factory=client_factory,
            policy_for=self._policy_for,
            clock=clock,
            admission=admission_options,
            on_refresh=self._refreshed,
            settings=settings,
        )
        self._admission = AdmissionControl(
            admission_options,
            self._roster.free_slots,
            clock,
            sleep,
            tenants,
            replicas=lambda model: len(self._roster.ready(model)),
        )
        # Models scaled to zero (cluster mode sets `wakes.wakeable` and the
        # timeout from the deployment spec and the controller).
        self.wakes = Wakes(
            ready=lambda model: bool(self._roster.ready(model)),
            timeout_s=lambda model: self.wake_timeouts.get(model, self.wake_timeout_s),
            max_waiting=admission_options.queue_size,
            clock=clock,
            sleep=sleep,
        )
        # The wait for a wake, per model where known (cluster/scaling_follower.py
        # sizes it to the model's measured load time), else this.
        self.wake_timeout_s = 900.0
        self.wake_timeouts: dict[str, float] = {}
        self._attempts = Attempts(
            self._roster,
            self._admission,
            self._policy_for,
            clock=clock,
            deadlines=deadlines,
            ejection=OutlierEjection(ejection or EjectionOptions(), clock),
            budget=RetryBudget(retry_budget),
            max_retries=settings.max_retries,
            adapter_affinity=AdapterAffinity(options.epsilon, options.load_max_age_s)
            if options.adapter_affinity
            else None,
        )

    def _refreshed(self) -> None:
        self._admission.wake()  # replicas (and their caps) may have come
        self.wakes.refreshed()

    # -- the neurons ---------------------------------------------------------

    async def start(self) -> None:
        await self._roster.start()

    async def stop(self) -> None:
        await self._roster.stop()

    async def update(self, addresses: list[str]) -> None:
        """Follow the endpoint table: add new neurons (polled at once), retire
        the ones that left it."""
        await self._roster.update(addresses)
        self._refreshed()  # a new replica may end a wake, or free slots

    async def refresh(self) -> None:
        await self._roster.refresh()

    async def refresh_load(self) -> None:
        """Ask each ready neuron for its engine's load, once."""
        await self._roster.refresh_load()

    async def poll_load(self) -> None:
        """One pass of the periodic Load poll (idle neurons asked less often)."""
        await self._roster.poll_load()

    def served_models(self) -> dict[str, pb.ModelInfo]:
        """Models that at least one ready neuron serves right now."""
        return self._roster.served_models()

    def policy(self, model: str) -> RoutingPolicy:
        """The routing policy that chooses `model`'s neurons."""
        return self._policy_for(model)

    def model_label(self, model: str) -> str:
        """`model` as a metrics label: a known model's id, else "unknown" (a
        client's made-up names must not become label values)."""
        return self._roster.model_label(model)

    def neurons(self) -> list[tuple[str, pb.InfoResponse | None]]:
        """Each configured neuron's address and its last Info (None: never answered)."""
        return [(s.address, s.info) for s in self._roster.states]

    def in_flight(self) -> dict[str, int]:
        """Requests this pool has in flight per neuron address (for the
        controller's status; several states may share an address)."""
        return self._roster.in_flight()

    def missing_models(self) -> list[str]:
        """Expected models with no ready neuron (all of them if none is
        ready); a model scaled to zero is not missing: it serves after a wake."""
        served = self.served_models()
        if not self._roster.expected:
            return [] if served or self.wakes.wakeable else ["(any model)"]
        return [m for m in self._roster.expected if m not in served and not self.wakes.sleeping(m)]

    async def add_adapter(self, model: str, adapter_id: str, source: str) -> list[str]:
        """Serve the LoRA adapter at `source` as `adapter_id` on every ready
        replica of `model`, loaded there now; the replicas' addresses. The
        first replica is asked alone: a source it refuses (no
        adapter_config.json, a rank too high, another base model) is refused
        before any other replica is asked."""
        if self._roster.known(adapter_id):
            raise InvalidRequestError(f"'{adapter_id}' is already a model's id.", param="id")
        replicas = [s for s in self._roster.ready(model) if not s.is_adapter(model)]
        if not replicas:
            raise ModelNotFoundError(f"No ready replica serves the model '{model}'.")
        first, *rest = replicas
        await first.client.load_adapter(adapter_id, source, ADAPTER_LOAD_TIMEOUT_S)
        await _each(s.client.load_adapter(adapter_id, source, ADAPTER_LOAD_TIMEOUT_S) for s in rest)
        await self._roster.refresh()  # their Info lists it now
        return [s.address for s in replicas]

    async def remove_adapter(self, adapter_id: str) -> list[str]:
        """Serve `adapter_id` no more: off every replica once its requests
        there have ended; the replicas' addresses."""
        replicas = [s for s in self._roster.states if s.ready and s.is_adapter(adapter_id)]
        if not replicas:
            raise ModelNotFoundError(f"The model '{adapter_id}' does not exist.")
        await _each(s.client.unload_adapter(adapter_id, ADAPTER_LOAD_TIMEOUT_S) for s in replicas)
        await self._roster.refresh()
        return [s.address for s in replicas]

    def set_adapters(self, parents: Mapping[str, str]) -> None:
        """The adapters served in cluster mode, each with its base model's id
        (the spec file's at start, then the controller's table: those added
        at run time too): a request for one wakes its base when that is
        scaled to zero, and counts as its base's while it waits; one left
        out is unknown once no neuron serves it (404)."""
        self._roster.parents = dict(parents)

    def sleeping_models(self) -> dict[str, bool]:
        """Models scaled to zero (no ready replica), each with whether a
        request is waking it now."""
        return {
            m: self.wakes.waking(m) for m in sorted(self.wakes.wakeable) if self.wakes.sleeping(m)
        }

    def waiting(self) -> dict[str, int]:
        """Requests waiting per model: in its admission queue, or for its wake."""
        counts = self.wakes.waiting()
        for model in {*self._roster.expected, *self.wakes.wakeable}:
            if depth := self._admission.depth(model):
                counts[model] = counts.get(model, 0) + depth
        return counts  # an adapter's requests queue as its base's (attempts.py)

    def kv_usage(self) -> dict[str, float]:
        """The fullest KV cache (0..1) among each model's ready replicas, as
        their engines last reported it (models whose engines report none: absent)."""
        out: dict[str, float] = {}
        for state in self._roster.states:
            usage = state.load.kv_cache_usage if state.ready and state.load else None
            if usage is None:
                continue
            for model in state.models:
                out[model] = max(out.get(model, 0.0), usage)
        return out

    def caps(self) -> dict[str, int]:
        """The largest concurrency cap among each model's ready replicas."""
        out: dict[str, int] = {}
        for state in self._roster.states:
            cap = self._roster.cap(state) if state.ready else None
            if cap is None:
                continue
            for model in state.models:
                out[model] = max(out.get(model, 0), cap)
        return out

    def queued(self, model: str) -> int:
        """Requests for `model` waiting in its admission queue."""
        return self._admission.depth(model)

    # -- requests ------------------------------------------------------------

    def check_task(self, model: str, task: pb.ModelTask, endpoint: str) -> None:
        """Reject, with the models that can, a request for a model that cannot
        serve the endpoint (a chat model asked to embed, and the reverse)."""
        served = self.served_models()
        info = served.get(model)
        if info is None or info.task == task:
            return  # unknown models are routed and answered with 404 or 503
        able = sorted(m.id for m in served.values() if m.task == task)
        raise InvalidRequestError(
            f"The model '{model}' cannot serve {endpoint}. Models that can: "
            f"{', '.join(able) or 'none right now'}.",
            param="model",
        )

    def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None = None
    ) -> AsyncIterator[pb.GenerateResponse]:
        """The neuron's stream for `request`. An attempt that fails before its
        first message is retried on another neuron; after it, the error goes
        to the caller (part of the answer has already gone out). A model
        scaled to zero (an adapter's base) is woken first (wake.py)."""
        base = self._roster.base_of(request.model)
        if self.wakes.sleeping(base):
            return self._woken(request, base, hints)
        return self._attempts.generate(request, hints)

    async def _woken(
        self, request: pb.GenerateRequest, base: str, hints: RouteHints | None
    ) -> AsyncIterator[pb.GenerateResponse]:
        """`request` once `base` (its model, or an adapter's base) is awake."""
        await self.wakes.wait(base, self.model_label(base))
        async for message in self._attempts.generate(request, hints):
            yield message

    async def embed(
        self, request: pb.EmbedRequest, hints: RouteHints | None = None
    ) -> pb.EmbedResponse:
        await self.wakes.wait(request.model, self.model_label(request.model))
        return await self._attempts.embed(request, hints)

    async def tokenize(
        self, request: pb.TokenizeRequest, hints: RouteHints | None = None
    ) -> pb.TokenizeResponse:
        return await self._attempts.tokenize(request, hints)

    async def detokenize(
        self, request: pb.DetokenizeRequest, hints: RouteHints | None = None
    ) -> pb.DetokenizeResponse:
        return await self._attempts.detokenize(request, hints)


async def _each(calls: Iterable[Awaitable[None]]) -> None:
    """Every call, at once; the first failure raised once all have ended."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
