"""A request's attempts: which neuron takes each, and what a failure means.

Generate and embed go through one loop (`Attempts.run`): admission
(`admission.py`) before the first attempt, then dispatch to the routing
policy's choice (`policy.py`; the roster's ready neurons below their caps,
ejected ones only when nothing else is left), and on a failure before
anything reached the client a retry on a neuron the request has not tried,
within the retry budget (`retry_budget.py`), `max_retries` and the total
deadline. A request's own errors (the error table's `caused_by_request`) go
straight back to the caller and count for the neuron; the neuron's failures
count towards its outlier ejection (`ejection.py`). Each attempt counts
against its neuron from dispatch to its end.

What one attempt does is the caller's: a generate attempt is the neuron's
stream, each wait for a message bounded by the first-token and idle
deadlines (`deadlines.py`) and cut short when the health poll finds the
neuron gone; an embed (tokenize, detokenize) attempt is one call. For a
policy that routes on the prompt's prefix the request is hashed once
(`prefix.py`) and every attempt carries it. A request for a LoRA adapter
is offered to the policy only on the replicas `adapter_affinity.py` picks
(those holding it within the load bound first), its prefix salted with the
adapter's id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from axon import tracing
from axon.errors import (
    EngineDiedError,
    InternalError,
    ModelNotFoundError,
    ModelOverloadedError,
    NeuraxisError,
    UnavailableError,
    caused_by_request,
)
from axon.grpc_limits import check_size
from axon.v1 import neuron_pb2 as pb
from cortex import metrics
from cortex.routing.adapter_affinity import AdapterAffinity, dispatched
from cortex.routing.admission import AdmissionControl, set_class
from cortex.routing.admission import Ticket as Admitted
from cortex.routing.client import Metadata, NeuronConnection
from cortex.routing.deadlines import Deadlines, RequestDeadline, Watchdog
from cortex.routing.ejection import OutlierEjection
from cortex.routing.policy import Decision, Outcome, RouteHints, RouteRequest, RoutingPolicy
from cortex.routing.request_cost import Spent
from cortex.routing.retry_budget import RetryBudget, Ticket
from cortex.routing.roster import NeuronState, Roster
from cortex.routing.spans import Request, admission_attributes, attempt_span

log = logging.getLogger("neuraxis.cortex")
# What a client is told when its neuron went silent mid-request (the address
# is logged, not sent).
HEALTH_LOST = "The neuron serving this request stopped answering its health checks."

T = TypeVar("T")
# One attempt on a neuron within the request's deadline, with the trace
# context the neuron continues: what it yields goes to the caller as it comes.
Attempt = Callable[[NeuronState, RequestDeadline, Metadata], AsyncIterator[T]]


@dataclass(frozen=True)
class _Dispatch:
    """One dispatch of a request: the neuron and the route it was chosen by."""

    state: NeuronState
    route: RouteRequest
    decision: Decision = Decision.BALANCED  # why the policy chose it (a metrics label)


class Attempts:
    def __init__(
        self,
        roster: Roster,
        admission: AdmissionControl,
        policy_for: Callable[[str], RoutingPolicy],
        *,
        clock: Callable[[], float],
        deadlines: Deadlines,
        ejection: OutlierEjection,
        budget: RetryBudget,
        max_retries: int,
        adapter_affinity: AdapterAffinity | None = None,
    ) -> None:
        self._roster = roster
        self._admission = admission
        self._policy_for = policy_for
        self._clock = clock
        self._deadlines = deadlines
        self._ejection = ejection
        self._budget = budget
        self._max_retries = max_retries
        # None: adapter-blind (an adapter's requests routed as any model's).
        self._adapter_affinity = adapter_affinity

    def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None
    ) -> AsyncIterator[pb.GenerateResponse]:
        """The neuron's stream for `request`, through `run`."""
        return self.run(
            request,
            hints,
            lambda state, deadline, metadata: self._stream(state, request, deadline, metadata),
        )

    async def embed(self, request: pb.EmbedRequest, hints: RouteHints | None) -> pb.EmbedResponse:
        """The embeddings of `request`, through `run`."""
        return await self._unary(request, hints, lambda c, t, m: c.embed(request, t, m))

    async def tokenize(
        self, request: pb.TokenizeRequest, hints: RouteHints | None = None
    ) -> pb.TokenizeResponse:
        """`request`'s token ids from a replica of its model, through `run`."""
        return await self._unary(request, hints, lambda c, t, m: c.tokenize(request, t, m))

    async def detokenize(
        self, request: pb.DetokenizeRequest, hints: RouteHints | None = None
    ) -> pb.DetokenizeResponse:
        return await self._unary(request, hints, lambda c, t, m: c.detokenize(request, t, m))

    async def _unary(
        self,
        request: Request,
        hints: RouteHints | None,
        call: Callable[[NeuronConnection, float, Metadata], Awaitable[T]],
    ) -> T:
        """The one answer of a unary call through `run`: each attempt is one
        `call` on the chosen neuron's client, bounded by the total deadline,
        with the attempt's trace context."""

        async def attempt(
            state: NeuronState, _: RequestDeadline, metadata: Metadata
        ) -> AsyncIterator[T]:
            yield await call(state.client, self._deadlines.total_s, metadata)

        [response] = [r async for r in self.run(request, hints, attempt)]
        return response

    async def run(
        self, request: Request, hints: RouteHints | None, attempt: Attempt[T]
    ) -> AsyncIterator[T]:
        """What `attempt` yields on the chosen neuron, retried on another one
        when it fails before yielding anything; after that, the error goes
        to the caller (part of the answer has already gone out)."""
        check_size(request.ByteSize())  # before a neuron's transport refuses it
        claim = self._admission.claim(request, hints.tenant if hints is not None else "")
        if isinstance(request, pb.GenerateRequest):
            set_class(request, claim.cls)  # the class the engine should see
        # Time queued for a slot is bounded by the queue timeout, not the deadlines.
        with tracing.span("neuraxis.admission", admission_attributes(request, claim)):
            wait = hints.waited if hints is not None else None
            # An adapter queues as its base: they share the replicas' slots,
            # and one queue per model keeps its fair order and its count.
            base = self._roster.base_of(request.model)
            label = self._roster.model_label(base)
            admitted = await self._admission.admit(base, label, claim, wait)
        spent = Spent(request)
        deadline = RequestDeadline(self._deadlines, self._clock)
        with self._budget.ticket() as ticket, self._admission.settling(admitted, spent):
            tried: list[NeuronState] = []
            chosen: _Dispatch | None = self._first(request, hints)
            while chosen is not None:
                current, chosen = chosen, None
                self._dispatch(current)
                started = False
                outcome = Outcome.CANCELLED  # unless the attempt ends or fails
                # Not current: it lives across the stream's yields.
                span = attempt_span(request, current.state.address, len(tried))
                failure: NeuraxisError | None = None
                ended = False  # the attempt's accounts closed at its last message
                try:
                    async for item in attempt(current.state, deadline, tracing.metadata_for(span)):
                        if not started:
                            started = True
                            if span is not None:
                                span.add_event("first_message")
                        spent.see(item)
                        if spent.reported and not ended:
                            # The neuron's last message (its usage): the request is
                            # over there, so its slot frees before the client has the
                            # message. The API's readers stop at the usage and never
                            # ask for the stream's end: closed only when this generator
                            # was collected, the slot stayed taken after the client had
                            # its answer and sent its next request, which then queued
                            # behind it, and the attempt counted as cancelled.
                            ended = True
                            await self._end(admitted, spent, span, None, current, Outcome.OK)
                        yield item
                    outcome = Outcome.OK
                except NeuraxisError as e:
                    failure = e
                    if caused_by_request(e):
                        outcome = Outcome.OK  # the neuron answered: the request was at fault
                        raise
                    outcome = Outcome.FAILED
                    chosen = self._retry_or_raise(
                        request, current, e, tried, started, ticket, deadline
                    )
                finally:
                    if not ended:
                        last = chosen is None  # no retry follows: the request ends here
                        await self._end(
                            admitted if last else None, spent, span, failure, current, outcome
                        )

    async def _stream(
        self,
        state: NeuronState,
        request: pb.GenerateRequest,
        deadline: RequestDeadline,
        metadata: Metadata,
    ) -> AsyncIterator[pb.GenerateResponse]:
        """One generate attempt: the neuron's stream, each wait for a message
        bounded by the request's deadlines and cut short if the health poll
        finds the neuron gone."""
        remaining = deadline.remaining()
        if remaining <= 0:
            raise deadline.exceeded("total")
        stream = aiter(state.client.generate(request, remaining, metadata))
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
                        log.warning("neuron %s stopped answering its health checks", state.address)
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

    # -- choosing ------------------------------------------------------------

    def _first(self, request: Request, hints: RouteHints | None) -> _Dispatch:
        hints = hints or RouteHints()
        prefix: tuple[int, ...] = ()
        hasher = self._policy_for(request.model).prefix_hasher
        if hasher is not None and isinstance(request, pb.GenerateRequest):
            # Hashed once per request; retries carry the same prefix. An
            # adapter's prefixes are its own: another adapter's (or the base
            # model's) cached prefix of the same prompt is of no use to it.
            salt = hints.prompt_cache_key
            if self._adapter_affinity is not None and self._roster.is_adapter(request.model):
                salt = f"{request.model}\x1f{salt or ''}"
            prefix = hasher.blocks(request, salt=salt)
        route = self._route(request, hints, attempt=0, prefix=prefix)
        state, decision = self._choose(route, [])
        return _Dispatch(state, route, decision)

    def _route(
        self, request: Request, hints: RouteHints, attempt: int, prefix: tuple[int, ...]
    ) -> RouteRequest:
        return RouteRequest(
            model=request.model,
            request_id=request.request_id,
            now=self._clock(),
            hints=hints,
            attempt=attempt,
            prefix=prefix,
        )

    def _choose(
        self, route: RouteRequest, exclude: list[NeuronState]
    ) -> tuple[NeuronState, Decision]:
        """`_pick`, in a span of its own when tracing: the policy, the neuron
        chosen and why (hit, overflow, fallback, ...)."""
        if not tracing.enabled():
            return self._pick(route, exclude)
        policy = self._policy_for(route.model).name
        attributes: tracing.Attributes = {
            "neuraxis.routing.policy": policy,
            "neuraxis.attempt": route.attempt,
        }
        with tracing.span("neuraxis.route", attributes) as span:
            state, decision = self._pick(route, exclude)
            chosen = {"neuraxis.routing.neuron": state.address}
            tracing.annotate(span, {**chosen, "neuraxis.routing.decision": decision.value})
        return state, decision

    def _pick(
        self, route: RouteRequest, exclude: list[NeuronState]
    ) -> tuple[NeuronState, Decision]:
        """The policy's choice among the ready neurons serving the model that
        this request has not tried, and the kind of decision; or why there
        is none."""
        model = route.model
        ready = [s for s in self._roster.ready(model) if all(s is not t for t in exclude)]
        # Below their caps if any is (an admitted first attempt always finds
        # one; a retry may go over rather than fail).
        ready = [s for s in ready if self._roster.below_cap(s)] or ready
        # Ejected neurons only when nothing else is left (never all out).
        eligible = [s for s in ready if not self._ejection.ejected(s.address)] or ready
        affinity = self._adapter_affinity
        if eligible and affinity is not None and self._roster.is_adapter(model):
            # Replicas that hold the adapter, within the load bound, first.
            narrowed = affinity.narrow(
                [s.candidate() for s in eligible], [s.holding(model) for s in eligible], route.now
            )
            eligible = [eligible[i] for i in narrowed]
        if eligible:
            candidates = [s.candidate() for s in eligible]
            choice = self._policy_for(model).choose(candidates, route)
            for candidate, state in zip(candidates, eligible, strict=True):
                if candidate is choice.candidate:
                    return state, choice.decision
            log.error("request %s: the routing policy chose no candidate", route.request_id)
            raise InternalError("The router failed to choose a neuron.")
        if self._roster.known(model) or self._roster.loading():
            raise UnavailableError(
                f"No neuron serving '{model}' is ready; try again shortly.", retry_after=2
            )
        raise ModelNotFoundError(f"The model '{model}' does not exist.")

    # -- counting ------------------------------------------------------------

    def _dispatch(self, chosen: _Dispatch) -> None:
        state = chosen.state
        state.outstanding += 1  # counted at dispatch, not at the first token
        model = self._roster.model_label(chosen.route.model)
        policy = self._policy_for(chosen.route.model)
        metrics.record_routed(model, state.address)
        metrics.record_decision(model, state.address, policy.name, chosen.decision)
        adapter = chosen.route.model
        if state.is_adapter(adapter):
            metrics.record_adapter_route(model, state.holding(adapter).holds)
            # Held from now on (and what it evicts gone), as far as this
            # cortex knows, until the neuron's next Load report: the next
            # request follows this one instead of loading it elsewhere.
            busy = state.busy_adapters()
            state.adapters = dispatched(state.adapters, adapter, state.max_adapters, busy)
            state.adapter_requests[adapter] += 1
            if self._adapter_affinity is not None:
                self._adapter_affinity.requested(adapter, chosen.route.now)
        policy.on_dispatch(state.candidate(), chosen.route)

    async def _end(
        self,
        admitted: Admitted | None,
        spent: Spent,
        span: tracing.Span | None,
        failure: NeuraxisError | None,
        chosen: _Dispatch,
        outcome: Outcome,
    ) -> None:
        """An attempt is over: its span ends and its neuron hears how it
        went; with `admitted` (no retry follows) the request is settled
        first, before its slot frees, so that the slot may be held for its
        tenant's next request (admission.py, slot holds)."""
        tracing.end(span, failure)
        if admitted is not None:
            self._admission.settle(admitted, spent, freeing=True)
        await self._done(chosen, outcome)

    async def _done(self, chosen: _Dispatch, outcome: Outcome) -> None:
        # The neuron this attempt ran on, even when a retry has already been
        # chosen: its count, not the next one's, goes down.
        state = chosen.state
        state.outstanding -= 1
        if state.adapter_requests[chosen.route.model] > 0:
            state.adapter_requests[chosen.route.model] -= 1
        self._policy_for(chosen.route.model).on_complete(state.address, chosen.route, outcome)
        if outcome is Outcome.OK:
            self._ejection.success(state.address)
        elif outcome is Outcome.FAILED:
            self._count_failure(state)
        for model in state.models:
            self._admission.wake(model)  # a slot freed
        await self._roster.close_if_idle(state)

    def _count_failure(self, state: NeuronState) -> None:
        ejected_for = self._ejection.failure(state.address, self._can_eject(state))
        if ejected_for is not None:
            metrics.record_ejection(state.address)
            log.warning(
                "neuron %s ejected for %.0f s after failing requests", state.address, ejected_for
            )

    def _can_eject(self, state: NeuronState) -> bool:
        """Not the last ready, not ejected replica of any model it serves."""
        return all(
            any(
                other is not state and not self._ejection.ejected(other.address)
                for other in self._roster.ready(model)
            )
            for model in state.models
        )

    # -- retrying ------------------------------------------------------------

    def _retry_or_raise(
        self,
        request: Request,
        failed: _Dispatch,
        error: NeuraxisError,
        tried: list[NeuronState],
        started: bool,
        ticket: Ticket,
        deadline: RequestDeadline,
    ) -> _Dispatch:
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
                metrics.record_retry_refused(self._roster.model_label(request.model))
                log.warning("request %s not retried: %s", request.request_id, refusal)
            elif chosen is not None:
                retry = _Dispatch(chosen[0], route, chosen[1])
        if retry is None:
            raise error
        metrics.record_retry(self._roster.model_label(request.model), state.address)
        log.warning(
            "request %s failed on %s before its first token (%s); retrying on %s",
            request.request_id,
            state.address,
            error.message,
            retry.state.address,
        )
        return retry

    def _alternative(
        self, route: RouteRequest, exclude: list[NeuronState]
    ) -> tuple[NeuronState, Decision] | None:
        try:
            return self._choose(route, exclude)
        except NeuraxisError:
            return None


def _neuron_down(error: NeuraxisError) -> bool:
    """Whether the attempt failed because its neuron is down (unreachable,
    shutting down, or gone silent: the pool's own health verdict), not
    because of what the engine did with the request or a lack of capacity."""
    return isinstance(error, UnavailableError) and not isinstance(
        error, EngineDiedError | ModelOverloadedError
    )
