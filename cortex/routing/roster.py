"""The neurons cortex can route to, what each serves, and how busy it is.

In static mode the roster is a configured list of addresses; in cluster mode
it follows the controller's endpoint table (`update`), and a replica that
leaves the table takes no new requests while its in-flight ones finish
(closed once idle). A background task polls every neuron's Info to learn
which are ready and which models they serve; one that stops answering the
poll within its timeout is taken out, its attempts in flight abandoned at
once (their watchdogs told), unless its streams are flowing. A second task
polls each ready neuron's `Load` every `load_interval_s` and keeps it,
stamped with the clock, as the neuron's `load` (a neuron idle at its last
report, with nothing of ours on it, only every IDLE_RECHECK_S).

The roster also knows each replica's concurrency cap (admission.py's
options over the batch size the neuron reports) and so the slots a model
has free. Which neuron takes a request, and what happens when it fails, is
attempts.py's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from axon.errors import DeadlineExceededError, NeuraxisError
from axon.v1 import neuron_pb2 as pb
from cortex import metrics
from cortex.routing.adapter_affinity import Holding, reported, victim
from cortex.routing.admission import AdmissionOptions
from cortex.routing.client import NeuronConnection
from cortex.routing.deadlines import Watchdog
from cortex.routing.policy import Candidate, EngineLoad, RoutingPolicy
from cortex.routing.pool_settings import PoolSettings

log = logging.getLogger("neuraxis.cortex")

# How long an idle neuron's load report is taken as it stands by the periodic
# Load poll: a report of nothing running or waiting, with nothing of ours on
# it, is asked again only after this. Each Load call costs cortex and the
# neuron together ~5 ms of CPU on a small host (grpc.aio), and the poll ran
# twice a second per neuron with no traffic at all (docs/performance.md,
# "Where an idle stack's fixed CPU goes"). Under routing's default 2 s
# load_max_age_s, so that the idle report stays fresh for the policies.
IDLE_RECHECK_S = 1.5

ClientFactory = Callable[[str], NeuronConnection]


@dataclass(eq=False)  # compared by identity: two states may share an address
class NeuronState:
    client: NeuronConnection
    ready: bool = False
    ever_seen: bool = False  # answered Info at least once
    models: dict[str, pb.ModelInfo] = field(default_factory=dict)
    outstanding: int = 0
    info: pb.InfoResponse | None = None
    retired: bool = False  # left the endpoint table; closed once idle
    load: EngineLoad | None = None  # the engine's last Load report
    # The attempts in flight here, abandoned when the health poll finds the
    # neuron gone.
    watchdogs: set[Watchdog] = field(default_factory=set)
    # When a stream message from it last arrived (the clock): proof of life
    # when an Info poll misses its deadline.
    last_heard: float = float("-inf")
    # Info polls in a row that missed their deadline.
    missed_polls: int = 0
    # The LoRA adapters its engine holds (Info and Load say), how many it
    # holds at once, and this cortex's requests in flight per adapter (an
    # adapter with a request in flight is held, or being loaded for it).
    adapters: tuple[str, ...] = ()  # least recently used first
    max_adapters: int = 0
    adapter_requests: Counter[str] = field(default_factory=Counter)

    @property
    def address(self) -> str:
        return self.client.address

    def is_adapter(self, model: str) -> bool:
        info = self.models.get(model)
        return info is not None and bool(info.parent)

    def holding(self, adapter: str) -> Holding:
        """Whether it holds `adapter`, has room for one more, and which one
        loading another would evict."""
        busy = self.busy_adapters()
        held = {*self.adapters, *busy}
        room = len(held) < self.max_adapters
        evicts = None if room else victim(self.adapters, busy)
        return Holding(holds=adapter in held, room=room, victim=evicts)

    def report_adapters(self, report: Sequence[str]) -> None:
        """The engine's adapters as Info or Load reported them, with those
        this cortex's requests are loading there."""
        self.adapters = reported(report, self.max_adapters, self.busy_adapters())

    def busy_adapters(self) -> frozenset[str]:
        """The adapters this cortex has requests in flight on, here."""
        return frozenset(a for a, n in self.adapter_requests.items() if n > 0)

    def candidate(self) -> Candidate:
        """What a routing policy sees of this neuron."""
        return Candidate(address=self.address, outstanding=self.outstanding, load=self.load)


class Roster:
    def __init__(
        self,
        clients: Sequence[NeuronConnection],
        expected_models: list[str],
        *,
        client_factory: ClientFactory,
        policy_for: Callable[[str], RoutingPolicy],
        clock: Callable[[], float],
        admission: AdmissionOptions,
        on_refresh: Callable[[], None],
        settings: PoolSettings,
    ) -> None:
        """`on_refresh` runs after each Info poll (replicas, and their caps,
        may have come); `policy_for` names each model's policy in metrics."""
        self.states = [NeuronState(c) for c in clients]
        self.expected = list(expected_models)
        # The adapters the controller serves and their base models (cluster
        # mode: the spec's and those added at run time, pool.set_adapters):
        # known, and their base's, even while no replica reports them.
        self.parents: dict[str, str] = {}
        self._client_factory = client_factory
        self._policy_for = policy_for
        self._clock = clock
        self._admission = admission
        self._on_refresh = on_refresh
        self._poll_interval = settings.poll_interval_s
        self._load_interval = settings.load_interval_s
        self._health_timeout = settings.health_timeout_s
        self._health_misses = settings.health_misses
        self._pollers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.refresh()
        await self.refresh_load()
        self._pollers = [
            asyncio.create_task(self._every(self._poll_interval, self.refresh)),
            asyncio.create_task(self._every(self._load_interval, self.poll_load)),
        ]

    async def stop(self) -> None:
        for poller in self._pollers:
            poller.cancel()
        await asyncio.gather(*(s.client.close() for s in self.states), return_exceptions=True)

    async def update(self, addresses: list[str]) -> None:
        """Follow the endpoint table: add new neurons (polled at once), retire
        the ones that left it."""
        current = {s.address: s for s in self.states}
        added = [NeuronState(self._client_factory(a)) for a in addresses if a not in current]
        keep = set(addresses)
        for state in self.states:
            if state.address not in keep:
                state.retired = True
                state.ready = False
                metrics.set_replica_health(state.address, False)
                await self.close_if_idle(state)
        self.states = [s for s in self.states if not s.retired] + added
        if added:
            await asyncio.gather(*(self._refresh_one(s) for s in added))
        log.info("endpoint table: %s", ", ".join(addresses) or "empty")

    async def close_if_idle(self, state: NeuronState) -> None:
        """Close a retired neuron's client once its last request is done."""
        if state.retired and state.outstanding == 0:
            await state.client.close()

    # -- what it serves ------------------------------------------------------

    def ready(self, model: str) -> list[NeuronState]:
        """The ready neurons serving `model`, in roster order."""
        return [s for s in self.states if s.ready and model in s.models]

    def served_models(self) -> dict[str, pb.ModelInfo]:
        """Models that at least one ready neuron serves right now."""
        out: dict[str, pb.ModelInfo] = {}
        for state in self.states:
            if state.ready:
                for model_id, info in state.models.items():
                    out.setdefault(model_id, info)
        return out

    def is_adapter(self, model: str) -> bool:
        """Whether `model` is a LoRA adapter, as its neurons report it."""
        return any(s.is_adapter(model) for s in self.states)

    def base_of(self, model: str) -> str:
        """The base model of an adapter (as its neurons or the controller say), else
        `model` itself: an adapter's requests take its base's replica slots."""
        for state in self.states:
            info = state.models.get(model)
            if info is not None and info.parent:
                return info.parent
        return self.parents.get(model, model)

    def known(self, model: str) -> bool:
        """Expected, an adapter the controller serves, or served by some
        neuron (ready or not)."""
        return (
            model in self.expected
            or model in self.parents
            or any(model in s.models for s in self.states)
        )

    def model_label(self, model: str) -> str:
        """`model` as a metrics label: a known model's id, else "unknown" (a
        client's made-up names must not become label values)."""
        return model if self.known(model) else metrics.UNKNOWN_MODEL

    def loading(self) -> bool:
        """Some neuron has never answered Info: what it serves is not known yet."""
        return any(not s.ever_seen for s in self.states)

    def in_flight(self) -> dict[str, int]:
        """Requests in flight per neuron address (several states may share one)."""
        counts: dict[str, int] = {}
        for s in self.states:
            counts[s.address] = counts.get(s.address, 0) + s.outstanding
        return counts

    # -- caps ----------------------------------------------------------------

    def cap(self, state: NeuronState) -> int | None:
        reported = state.info.max_concurrency if state.info is not None else 0
        return self._admission.cap(reported)

    def below_cap(self, state: NeuronState) -> bool:
        cap = self.cap(state)
        return cap is None or state.outstanding < cap

    def free_slots(self, model: str) -> int | None:
        """Slots free on `model`'s ready replicas, or None when no cap
        applies (a replica without one, or none ready: the attempt answers)."""
        free, ready = 0, False
        for state in self.ready(model):
            cap = self.cap(state)
            if cap is None:
                return None
            free += max(0, cap - state.outstanding)
            ready = True
        return free if ready else None

    # -- polls ---------------------------------------------------------------

    async def refresh(self) -> None:
        """Ask every neuron for its Info, once."""
        await asyncio.gather(*(self._refresh_one(s) for s in list(self.states)))
        counts = dict.fromkeys(self.expected, 0)
        for state in self.states:
            metrics.set_replica_health(state.address, state.ready)
            for model in state.models:
                counts[model] = counts.get(model, 0) + (1 if state.ready else 0)
        metrics.set_healthy_replicas(counts)
        self._on_refresh()

    async def refresh_load(self) -> None:
        """Ask each ready neuron for its engine's load, once."""
        ready = [s for s in self.states if s.ready and not s.retired]
        await asyncio.gather(*(self._load_one(s) for s in ready))

    async def poll_load(self) -> None:
        """The periodic Load poll: as refresh_load, except for the neurons
        whose report said idle less than IDLE_RECHECK_S ago and that hold no
        request of ours now."""
        now = self._clock()
        ready = [s for s in self.states if s.ready and not s.retired and not _idle(s, now)]
        await asyncio.gather(*(self._load_one(s) for s in ready))

    @staticmethod
    async def _every(interval_s: float, poll: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await poll()

    async def _load_one(self, state: NeuronState) -> None:
        try:
            response = await state.client.load(timeout=max(self._load_interval, 0.5))
        except NeuraxisError as e:
            # The last report stays and ages out: policies ignore it once it
            # is stale, and the Info poll decides readiness.
            log.debug("neuron %s did not report its load: %s", state.address, e.message)
            return
        kv = response.kv_cache_usage if response.HasField("kv_cache_usage") else None
        state.load = EngineLoad(
            running=response.running,
            waiting=response.waiting,
            measured_at=self._clock(),
            kv_cache_usage=kv,
            own=state.outstanding,
        )
        state.report_adapters(response.adapters)

    async def _refresh_one(self, state: NeuronState) -> None:
        try:
            info = await state.client.info(timeout=self._health_timeout)
        except NeuraxisError as e:
            if isinstance(e, DeadlineExceededError):
                if self._heard_lately(state):
                    # Its streams flow: the poll was late (cortex's own loop
                    # under load), not the neuron. Taking it out here abandoned
                    # every stream on a healthy neuron (the soak: "no neuron is
                    # ready").
                    log.debug("neuron %s: Info late, streams flowing", state.address)
                    return
                state.missed_polls += 1
                if state.missed_polls < self._health_misses:
                    # One late answer is a loaded host (make test's two lanes:
                    # a healthy neuron beside a vLLM prefill missed one 1 s
                    # poll, and its request was abandoned), not a hung neuron.
                    log.debug("neuron %s: Info late (%d)", state.address, state.missed_polls)
                    return
            if state.ready:
                log.warning("neuron %s is not answering: %s", state.address, e.message)
            state.ready = False
            _abandon(state)
            return
        state.missed_polls = 0
        if state.retired:
            return
        if info.ready and not state.ready:
            log.info("neuron %s ready: %s", state.address, ", ".join(m.id for m in info.models))
        state.ever_seen = True
        state.info = info
        state.ready = info.ready
        if not info.ready:
            _abandon(state)
            return
        state.models = {m.id: m for m in info.models}
        state.max_adapters = info.max_adapters
        state.report_adapters(info.adapters)
        for model in state.models:
            metrics.touch_replica(model, state.address)
            policy = self._policy_for(model)
            metrics.touch_decisions(model, state.address, policy.name, policy.decisions)

    def _heard_lately(self, state: NeuronState) -> bool:
        return self._clock() - state.last_heard < self._health_timeout


def _idle(state: NeuronState, now: float) -> bool:
    """Whether the neuron's last load report said idle, lately, and it holds
    no request of ours now."""
    load = state.load
    return (
        load is not None
        and load.running == 0
        and load.waiting == 0
        and state.outstanding == 0
        and now - load.measured_at < IDLE_RECHECK_S
    )


def _abandon(state: NeuronState) -> None:
    """End the waits of the attempts in flight on a neuron the health poll
    found gone: each fails at once (retried elsewhere if nothing was sent
    yet)."""
    for watchdog in state.watchdogs:
        watchdog.neuron_down()
