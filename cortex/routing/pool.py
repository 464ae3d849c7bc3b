"""The neurons cortex can route to, what each serves, and how busy it is.

In static mode the pool is a configured list of addresses; in cluster mode it
follows the controller's endpoint table (`update`), and a replica that leaves
the table takes no new requests while its in-flight ones finish. A background
task polls every neuron's Info to learn which are ready and which models they
serve; a neuron that fails a request with UNAVAILABLE is taken out at once
and comes back with its next good poll, and one that stops answering the
poll within its timeout is taken out too, its requests in flight abandoned
at once (retried elsewhere before their first token, failed after it). Each
request counts against its neuron from the moment of dispatch.

A request whose neuron fails before the first token is retried elsewhere,
within the pool's retry budget (`retry_budget.py`) and its total deadline;
waiting for each message is bounded by the first-token and idle deadlines
(`deadlines.py`). A request's own errors (the error table's
`caused_by_request`) go straight back to the caller; the neuron's failures
count towards its outlier ejection (`ejection.py`): ejected neurons are
passed over while any other ready neuron serves the model.

Which of the eligible neurons takes an attempt is the routing policy's
decision (`policy.py`; one per model from a `PolicyTable`, least outstanding
by default): the pool hands it read-only candidates and dispatches to the
one it returns. A second background task polls each ready neuron's `Load`
(the engine's running and waiting requests) every `load_interval_s` and
keeps it, stamped with the pool's clock, as the candidate's `load`; each
policy judges its age. For a policy that routes on the prompt's prefix the
pool hashes the request once (`prefix.py`) and every attempt carries it.
Clients are made by a factory and time is read from a clock, both passed
in, so the pool is tested with in-memory neurons.

Before its first attempt a request passes admission control
(`admission.py`): each replica takes at most its concurrency cap, the pool
tells the admission queue how many slots a model has free and wakes it
whenever one may have freed, and the policy chooses among the replicas
below their caps.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from cortex import metrics
from cortex.routing.admission import AdmissionControl, AdmissionOptions, Sleep
from cortex.routing.client import NeuronClient, NeuronConnection
from cortex.routing.deadlines import Deadlines, RequestDeadline, Watchdog
from cortex.routing.ejection import EjectionOptions, OutlierEjection
from cortex.routing.factory import PolicyTable
from cortex.routing.policy import (
    Candidate,
    Decision,
    EngineLoad,
    Outcome,
    RouteHints,
    RouteRequest,
    RoutingPolicy,
)
from cortex.routing.retry_budget import RetryBudget, RetryBudgetOptions, Ticket
from neuraxis.core.errors import (
    DeadlineExceededError,
    EngineDiedError,
    InternalError,
    InvalidRequestError,
    ModelNotFoundError,
    ModelOverloadedError,
    NeuraxisError,
    UnavailableError,
    caused_by_request,
)
from neuraxis.core.grpc_limits import check_size
from neuraxis.core.v1 import neuron_pb2 as pb

log = logging.getLogger("neuraxis.cortex")
# What a client is told when its neuron went silent mid-request (the address
# is logged, not sent).
HEALTH_LOST = "The neuron serving this request stopped answering its health checks."

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
    # When a stream message from it last arrived (the pool's clock): proof of
    # life when an Info poll misses its deadline.
    last_heard: float = float("-inf")


@dataclass(frozen=True)
class _Attempt:
    """One dispatch of a request: the neuron and the route it was chosen by."""

    state: NeuronState
    route: RouteRequest
    decision: Decision = Decision.BALANCED  # why the policy chose it (a metrics label)


class NeuronPool:
    def __init__(
        self,
        clients: Sequence[NeuronConnection],
        expected_models: list[str],
        poll_interval_s: float,
        request_timeout_s: float,
        max_retries: int,
        *,
        client_factory: ClientFactory = NeuronClient,
        policy: RoutingPolicy | PolicyTable | None = None,
        clock: Callable[[], float] = time.monotonic,
        load_interval_s: float = 0.5,
        deadlines: Deadlines | None = None,
        ejection: EjectionOptions | None = None,
        retry_budget: RetryBudgetOptions | None = None,
        health_timeout_s: float = 1.0,
        admission: AdmissionOptions | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """`clients` are the static neurons; `client_factory` makes the ones
        the endpoint table adds (`update`). `policy` is one policy for every
        model, or a table of one per model (default: least outstanding).
        `request_timeout_s` is the total deadline; `deadlines` adds the
        first-token and idle ones (default: the total for each)."""
        self._states = [NeuronState(c) for c in clients]
        self._expected = list(expected_models)
        self._poll_interval = poll_interval_s
        self._timeout = request_timeout_s
        self._max_retries = max_retries
        self._client_factory = client_factory
        if isinstance(policy, RoutingPolicy):
            shared = policy
            self._policy_for: Callable[[str], RoutingPolicy] = lambda _model: shared
        else:
            self._policy_for = (policy or PolicyTable()).for_model
        self._clock = clock
        self._load_interval = load_interval_s
        self._pollers: list[asyncio.Task[None]] = []
        t = request_timeout_s
        self._deadlines = deadlines or Deadlines(first_token_s=t, idle_s=t, total_s=t)
        self._ejection = OutlierEjection(ejection or EjectionOptions(), clock)
        self._budget = RetryBudget(retry_budget)
        self._health_timeout = health_timeout_s
        self._admission_options = admission or AdmissionOptions()
        self._admission = AdmissionControl(self._admission_options, self._free_slots, clock, sleep)

    async def start(self) -> None:
        await self.refresh()
        await self.refresh_load()
        self._pollers = [
            asyncio.create_task(self._poll_forever()),
            asyncio.create_task(self._poll_load_forever()),
        ]

    async def stop(self) -> None:
        for poller in self._pollers:
            poller.cancel()
        await asyncio.gather(*(s.client.close() for s in self._states), return_exceptions=True)

    async def update(self, addresses: list[str]) -> None:
        """Follow the endpoint table: add new neurons (polled at once), retire
        the ones that left it."""
        current = {s.client.address: s for s in self._states}
        added = [NeuronState(self._client_factory(a)) for a in addresses if a not in current]
        keep = set(addresses)
        for state in self._states:
            if state.client.address not in keep:
                state.retired = True
                state.ready = False
                metrics.set_replica_health(state.client.address, False)
                if state.outstanding == 0:
                    await state.client.close()
        self._states = [s for s in self._states if not s.retired] + added
        if added:
            await asyncio.gather(*(self._refresh_one(s) for s in added))
        log.info("endpoint table: %s", ", ".join(addresses) or "empty")

    async def refresh(self) -> None:
        await asyncio.gather(*(self._refresh_one(s) for s in list(self._states)))
        counts = dict.fromkeys(self._expected, 0)
        for state in self._states:
            metrics.set_replica_health(state.client.address, state.ready)
            for model in state.models:
                counts[model] = counts.get(model, 0) + (1 if state.ready else 0)
        metrics.set_healthy_replicas(counts)
        self._admission.wake()  # replicas (and their caps) may have come

    def served_models(self) -> dict[str, pb.ModelInfo]:
        """Models that at least one ready neuron serves right now."""
        out: dict[str, pb.ModelInfo] = {}
        for state in self._states:
            if state.ready:
                for model_id, info in state.models.items():
                    out.setdefault(model_id, info)
        return out

    def policy(self, model: str) -> RoutingPolicy:
        """The routing policy that chooses `model`'s neurons."""
        return self._policy_for(model)

    def model_label(self, model: str) -> str:
        """`model` as a metrics label: a known model's id, else "unknown" (a
        client's made-up names must not become label values)."""
        if model in self._expected or any(model in s.models for s in self._states):
            return model
        return metrics.UNKNOWN_MODEL

    def neurons(self) -> list[tuple[str, pb.InfoResponse | None]]:
        """Each configured neuron's address and its last Info (None: never answered)."""
        return [(s.client.address, s.info) for s in self._states]

    def in_flight(self) -> dict[str, int]:
        """Requests this pool has in flight per neuron address (for the
        controller's status; several states may share an address)."""
        counts: dict[str, int] = {}
        for s in self._states:
            counts[s.client.address] = counts.get(s.client.address, 0) + s.outstanding
        return counts

    def missing_models(self) -> list[str]:
        """Expected models with no ready neuron (all of them if none is ready)."""
        served = self.served_models()
        if not self._expected:
            return [] if served else ["(any model)"]
        return [m for m in self._expected if m not in served]

    def check_task(self, model: str, task: pb.ModelTask, endpoint: str) -> None:
        """Reject, with the models that can, a request for a model that cannot
        serve the endpoint (a chat model asked to embed, and the reverse)."""
        info = self.served_models().get(model)
        if info is None or info.task == task:
            return  # unknown models are routed and answered with 404 or 503
        able = sorted(m.id for m in self.served_models().values() if m.task == task)
        raise InvalidRequestError(
            f"The model '{model}' cannot serve {endpoint}. Models that can: "
            f"{', '.join(able) or 'none right now'}.",
            param="model",
        )

    async def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None = None
    ) -> AsyncIterator[pb.GenerateResponse]:
        """The neuron's stream for `request`. An attempt that fails before its
        first message is retried on another neuron; after it, the error goes
        to the caller (part of the answer has already gone out)."""
        check_size(request.ByteSize())  # before a neuron's transport refuses it
        # Time queued for a slot is bounded by the queue timeout, not the deadlines.
        await self._admission.admit(request.model, self.model_label(request.model))
        deadline = RequestDeadline(self._deadlines, self._clock)
        with self._budget.ticket() as ticket:
            tried: list[NeuronState] = []
            attempt: _Attempt | None = self._first_attempt(request, hints)
            while attempt is not None:
                current, attempt = attempt, None
                self._dispatch(current)
                started = False
                outcome = Outcome.CANCELLED  # unless the stream ends or fails
                try:
                    async for response in self._watched(current.state, request, deadline):
                        started = True
                        yield response
                    outcome = Outcome.OK
                except NeuraxisError as e:
                    if caused_by_request(e):
                        outcome = Outcome.OK  # the neuron answered: the request was at fault
                        raise
                    outcome = Outcome.FAILED
                    attempt = self._retry_or_raise(
                        request, current, e, tried, started, ticket, deadline
                    )
                finally:
                    await self._done(current, outcome)

    async def _watched(
        self, state: NeuronState, request: pb.GenerateRequest, deadline: RequestDeadline
    ) -> AsyncIterator[pb.GenerateResponse]:
        """One attempt's stream, each wait for a message bounded by the
        request's deadlines and cut short if the health poll finds the
        neuron gone."""
        remaining = deadline.remaining()
        if remaining <= 0:
            raise deadline.exceeded("total")
        stream = aiter(state.client.generate(request, remaining))
        watchdog = Watchdog(deadline)
        state.watchdogs.add(watchdog)
        try:
            while True:
                watchdog.waiting()
                try:
                    response = await anext(stream)
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    if not watchdog.interrupted():
                        raise
                    if watchdog.expired == "neuron down":
                        log.warning(
                            "neuron %s stopped answering its health checks",
                            state.client.address,
                        )
                        raise UnavailableError(HEALTH_LOST) from None
                    raise deadline.exceeded(watchdog.expired or "total") from None
                finally:
                    watchdog.received()
                watchdog.started()
                state.last_heard = self._clock()
                yield response
        finally:
            watchdog.stop()
            state.watchdogs.discard(watchdog)
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()  # the neuron's call is cancelled now, not at collection

    async def embed(
        self, request: pb.EmbedRequest, hints: RouteHints | None = None
    ) -> pb.EmbedResponse:
        await self._admission.admit(request.model, self.model_label(request.model))
        with self._budget.ticket() as ticket:
            return await self._embed(request, hints, ticket)

    async def _embed(
        self, request: pb.EmbedRequest, hints: RouteHints | None, ticket: Ticket
    ) -> pb.EmbedResponse:
        deadline = RequestDeadline(self._deadlines, self._clock)
        tried: list[NeuronState] = []
        attempt = self._first_attempt(request, hints)
        while True:
            current = attempt
            self._dispatch(current)
            outcome = Outcome.CANCELLED
            try:
                response = await current.state.client.embed(request, self._timeout)
                outcome = Outcome.OK
                return response
            except NeuraxisError as e:
                if caused_by_request(e):
                    outcome = Outcome.OK
                    raise
                outcome = Outcome.FAILED
                attempt = self._retry_or_raise(request, current, e, tried, False, ticket, deadline)
            finally:
                await self._done(current, outcome)

    def _first_attempt(
        self, request: pb.GenerateRequest | pb.EmbedRequest, hints: RouteHints | None
    ) -> _Attempt:
        hints = hints or RouteHints()
        prefix: tuple[int, ...] = ()
        hasher = self._policy_for(request.model).prefix_hasher
        if hasher is not None and isinstance(request, pb.GenerateRequest):
            # Hashed once per request; retries carry the same prefix.
            prefix = hasher.blocks(request, salt=hints.prompt_cache_key)
        route = self._route(request, hints, attempt=0, prefix=prefix)
        state, decision = self._pick(route, [])
        return _Attempt(state, route, decision)

    def _route(
        self,
        request: pb.GenerateRequest | pb.EmbedRequest,
        hints: RouteHints,
        attempt: int,
        prefix: tuple[int, ...],
    ) -> RouteRequest:
        return RouteRequest(
            model=request.model,
            request_id=request.request_id,
            now=self._clock(),
            hints=hints,
            attempt=attempt,
            prefix=prefix,
        )

    def _dispatch(self, attempt: _Attempt) -> None:
        state = attempt.state
        state.outstanding += 1  # counted at dispatch, not at the first token
        model = self.model_label(attempt.route.model)
        policy = self._policy_for(attempt.route.model)
        metrics.record_routed(model, state.client.address)
        metrics.record_decision(model, state.client.address, policy.name, attempt.decision)
        policy.on_dispatch(self._candidate(state), attempt.route)

    async def _done(self, attempt: _Attempt, outcome: Outcome) -> None:
        # The neuron this attempt ran on, even when a retry has already been
        # chosen: its count, not the next one's, goes down.
        state = attempt.state
        state.outstanding -= 1
        self._policy_for(attempt.route.model).on_complete(
            state.client.address, attempt.route, outcome
        )
        if outcome is Outcome.OK:
            self._ejection.success(state.client.address)
        elif outcome is Outcome.FAILED:
            self._count_failure(state)
        for model in state.models:
            self._admission.wake(model)  # a slot freed
        if state.retired and state.outstanding == 0:
            await state.client.close()

    def _count_failure(self, state: NeuronState) -> None:
        address = state.client.address
        ejected_for = self._ejection.failure(address, self._can_eject(state))
        if ejected_for is not None:
            metrics.record_ejection(address)
            log.warning("neuron %s ejected for %.0f s after failing requests", address, ejected_for)

    def _can_eject(self, state: NeuronState) -> bool:
        """Not the last ready, not ejected replica of any model it serves."""
        return all(
            any(
                other is not state
                and other.ready
                and model in other.models
                and not self._ejection.ejected(other.client.address)
                for other in self._states
            )
            for model in state.models
        )

    def _retry_or_raise(
        self,
        request: pb.GenerateRequest | pb.EmbedRequest,
        failed: _Attempt,
        error: NeuraxisError,
        tried: list[NeuronState],
        started: bool,
        ticket: Ticket,
        deadline: RequestDeadline,
    ) -> _Attempt:
        """The next attempt after a failure, or raise the failure: only
        before anything reached the client, a bounded number of times,
        within the retry budget and the request's total deadline."""
        state = failed.state
        if isinstance(error, UnavailableError):
            state.ready = False
        tried.append(state)
        retry = None
        if not started and len(tried) <= self._max_retries and deadline.remaining() > 0:
            route = self._route(
                request, failed.route.hints, attempt=len(tried), prefix=failed.route.prefix
            )
            chosen = self._alternative(route, tried)
            refusal = None
            if chosen is not None:
                refusal = ticket.refusal(
                    engine_died=isinstance(error, EngineDiedError),
                    neuron_down=_neuron_down(error),
                )
            if refusal is not None:
                metrics.record_retry_refused(self.model_label(request.model))
                log.warning("request %s not retried: %s", request.request_id, refusal)
            elif chosen is not None:
                retry = _Attempt(chosen[0], route, chosen[1])
        if retry is None:
            raise error
        metrics.record_retry(self.model_label(request.model), state.client.address)
        log.warning(
            "request %s failed on %s before its first token (%s); retrying on %s",
            request.request_id,
            state.client.address,
            error.message,
            retry.state.client.address,
        )
        return retry

    def _alternative(
        self, route: RouteRequest, exclude: list[NeuronState]
    ) -> tuple[NeuronState, Decision] | None:
        try:
            return self._pick(route, exclude)
        except NeuraxisError:
            return None

    def _pick(
        self, route: RouteRequest, exclude: list[NeuronState]
    ) -> tuple[NeuronState, Decision]:
        """The policy's choice among the ready neurons serving the model that
        this request has not tried, and the kind of decision; or why there
        is none."""
        model = route.model
        ready = [
            s
            for s in self._states
            if s.ready and model in s.models and all(s is not t for t in exclude)
        ]
        # Below their caps if any is (an admitted first attempt always finds
        # one; a retry may go over rather than fail).
        ready = [s for s in ready if self._below_cap(s)] or ready
        # Ejected neurons only when nothing else is left (never all out).
        eligible = [s for s in ready if not self._ejection.ejected(s.client.address)] or ready
        if eligible:
            candidates = [self._candidate(s) for s in eligible]
            choice = self._policy_for(model).choose(candidates, route)
            for candidate, state in zip(candidates, eligible, strict=True):
                if candidate is choice.candidate:
                    return state, choice.decision
            log.error("request %s: the routing policy chose no candidate", route.request_id)
            raise InternalError("The router failed to choose a neuron.")
        known = model in self._expected or any(model in s.models for s in self._states)
        loading = any(not s.ever_seen for s in self._states)
        if known or loading:
            raise UnavailableError(
                f"No neuron serving '{model}' is ready; try again shortly.", retry_after=2
            )
        raise ModelNotFoundError(f"The model '{model}' does not exist.")

    def _cap(self, state: NeuronState) -> int | None:
        reported = state.info.max_concurrency if state.info is not None else 0
        return self._admission_options.cap(reported)

    def _below_cap(self, state: NeuronState) -> bool:
        cap = self._cap(state)
        return cap is None or state.outstanding < cap

    def _free_slots(self, model: str) -> int | None:
        """Slots free on `model`'s ready replicas, or None when no cap
        applies (a replica without one, or none ready: `_pick` answers)."""
        free, ready = 0, False
        for state in self._states:
            if state.ready and model in state.models:
                cap = self._cap(state)
                if cap is None:
                    return None
                free += max(0, cap - state.outstanding)
                ready = True
        return free if ready else None

    def queued(self, model: str) -> int:
        """Requests for `model` waiting in its admission queue."""
        return self._admission.depth(model)

    @staticmethod
    def _candidate(state: NeuronState) -> Candidate:
        return Candidate(
            address=state.client.address, outstanding=state.outstanding, load=state.load
        )

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self._poll_interval)
            await self.refresh()

    async def refresh_load(self) -> None:
        """Ask each ready neuron for its engine's load, once."""
        ready = [s for s in self._states if s.ready and not s.retired]
        await asyncio.gather(*(self._load_one(s) for s in ready))

    async def _poll_load_forever(self) -> None:
        while True:
            await asyncio.sleep(self._load_interval)
            await self.refresh_load()

    async def _load_one(self, state: NeuronState) -> None:
        try:
            response = await state.client.load(timeout=max(self._load_interval, 0.5))
        except NeuraxisError as e:
            # The last report stays and ages out: policies ignore it once it
            # is stale, and the Info poll decides readiness.
            log.debug("neuron %s did not report its load: %s", state.client.address, e.message)
            return
        kv = response.kv_cache_usage if response.HasField("kv_cache_usage") else None
        state.load = EngineLoad(
            running=response.running,
            waiting=response.waiting,
            measured_at=self._clock(),
            kv_cache_usage=kv,
            own=state.outstanding,
        )

    async def _refresh_one(self, state: NeuronState) -> None:
        try:
            info = await state.client.info(timeout=self._health_timeout)
        except NeuraxisError as e:
            if isinstance(e, DeadlineExceededError) and self._heard_lately(state):
                # Its streams flow: the poll was late (cortex's own loop under
                # load), not the neuron. Taking it out here abandoned every
                # stream on a healthy neuron (the soak: "no neuron is ready").
                log.debug("neuron %s: Info late, streams flowing", state.client.address)
                return
            if state.ready:
                log.warning("neuron %s is not answering: %s", state.client.address, e.message)
            state.ready = False
            self._abandon(state)
            return
        if state.retired:
            return
        if info.ready and not state.ready:
            log.info(
                "neuron %s ready: %s", state.client.address, ", ".join(m.id for m in info.models)
            )
        state.ever_seen = True
        state.info = info
        state.ready = info.ready
        if not info.ready:
            self._abandon(state)
        if info.ready:
            state.models = {m.id: m for m in info.models}
            for model in state.models:
                metrics.touch_replica(model, state.client.address)
                policy = self._policy_for(model)
                metrics.touch_decisions(model, state.client.address, policy.name, policy.decisions)

    def _heard_lately(self, state: NeuronState) -> bool:
        return self._clock() - state.last_heard < self._health_timeout

    @staticmethod
    def _abandon(state: NeuronState) -> None:
        """End the waits of the attempts in flight on a neuron the health
        poll found gone: each fails at once (retried elsewhere if nothing
        was sent yet)."""
        for watchdog in state.watchdogs:
            watchdog.neuron_down()


def _neuron_down(error: NeuraxisError) -> bool:
    """Whether the attempt failed because its neuron is down (unreachable,
    shutting down, or gone silent: the pool's own health verdict), not
    because of what the engine did with the request or a lack of capacity."""
    return isinstance(error, UnavailableError) and not isinstance(
        error, EngineDiedError | ModelOverloadedError
    )
