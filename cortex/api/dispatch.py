"""Handing an API request's internal requests to the neurons, observed by
one request tracker (cortex/api/lifecycle.py: metrics and the log line).

A handler first `claim`s its request for its surface (cortex/schemas/
surfaces.py), which gives it its id; the surface and the id then travel in
the request's context (cortex/http/context.py), not in arguments.

`route` checks the model's task and starts the neuron streams; `start` also
waits for each stream's first message, so that an error raised before
generation starts (bad model, prompt too long, no neuron) becomes the HTTP
status instead of an error inside a 200 stream. `embed` is the unary
counterpart. What the streams become on the wire is the endpoints' business.

Both first apply the caller's principal (cortex/auth/): a model outside its
key's list is a 404 like an unknown model, and a rate-limited key's request
is admitted (tokens reserved) before it is routed and settled when its
streams end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

from fastapi import Request

from axon.errors import InvalidRequestError
from axon.priority import DEFAULT_CLASS, PriorityClass, capped
from axon.protomaps import PB_TO_CLASS
from axon.v1 import neuron_pb2 as pb
from cortex.api import caps
from cortex.api.accounting import account_for
from cortex.api.gateway import gateway_of
from cortex.api.lifecycle import Tracker, outcome_of, tracked
from cortex.api.streams import first_messages
from cortex.auth.limiter import Admission, estimate_embed, estimate_generate, output_cap
from cortex.http.context import RequestContext, context_of
from cortex.http.disconnect import ClientDisconnectedError, cancel_on_disconnect
from cortex.routing.policy import RouteHints
from cortex.schemas.surfaces import Surface

Stream = AsyncIterator[pb.GenerateResponse]
T = TypeVar("T")


def claim(request: Request, surface: Surface) -> str:
    """The request is `surface`'s: its new id (what the answer, the log
    lines and a 500 carry)."""
    context = context_of(request)
    context.surface = surface
    context.request_id = surface.new_request_id()
    return context.request_id


def _claimed(request: Request) -> tuple[RequestContext, Surface, str]:
    context = context_of(request)
    if context.surface is None or context.request_id is None:
        raise RuntimeError("dispatch of a request no surface has claimed")
    return context, context.surface, context.request_id


def check_model(request: Request, model: str) -> None:
    """404 for a model the caller's key may not use, as if it did not exist."""
    context_of(request).principal.check_model(model)


async def _admit(request: Request, tokens: int, parts: int, output: int = 0) -> Admission | None:
    """Reserve the request against its key's limits (None: no limits)."""
    limiter = gateway_of(request).limiter
    context = context_of(request)
    principal = context.principal
    if limiter is None or not limiter.applies(principal):
        return None
    context.admission = await limiter.admit(principal, tokens, parts, output)
    return context.admission


async def admit_request(request: Request) -> Admission | None:
    """Count a request that generates nothing toward its key's rpm and
    max_concurrent (no tokens); None: no limits."""
    return await _admit(request, 0, 1)


def _tracker(
    request: Request, model: str, parts: int = 1, asked: PriorityClass = DEFAULT_CLASS
) -> Tracker:
    """The request's tracker; from here on the error handlers must not count
    it again. Its usage is accounted in the class it `asked` for, capped by
    its tenant's ceiling as admission caps it."""
    context, surface, request_id = _claimed(request)
    gateway = gateway_of(request)
    label = gateway.neurons.model_label(model)
    context.tracked = True
    principal = context.principal
    ceiling = gateway.tenant_policies.policy(principal.tenant).max_priority
    account = account_for(
        principal,
        model,
        gateway.ledger,
        gateway.tenant_tokens,
        capped(asked, ceiling),
        context.waited,
    )
    return Tracker(gateway.recorder, surface.name, label, request_id, parts, account)


async def _route(
    request: Request,
    internals: list[pb.GenerateRequest],
    hints: RouteHints | None,
    tokens_param: str | None = None,
) -> tuple[list[Stream], Admission | None]:
    claimed, surface, _ = _claimed(request)
    neurons = gateway_of(request).neurons
    model = internals[0].model
    check_model(request, model)
    neurons.check_task(model, pb.MODEL_TASK_GENERATE, surface.path)
    info = neurons.served_models().get(model)
    context = info.max_context_length if info is not None else 0
    caps.check_generate(gateway_of(request).caps, surface, internals, info, tokens_param)
    unset = caps.default_output(info)
    tokens = sum(estimate_generate(r, context, unset) for r in internals)
    output = sum(output_cap(r, unset) for r in internals)
    admission = await _admit(request, tokens, len(internals), output)
    tracker = _tracker(request, model, len(internals), PB_TO_CLASS[internals[0].priority])
    # `hints` (the request's affinity keys) go to the routing policy of each,
    # with its tenant for its share of the admission queue, and where to
    # tell how long it waited there.
    tenant = claimed.principal.tenant
    hints = replace(hints or RouteHints(), tenant=tenant, waited=claimed.waited)
    on_end = admission.stream_ended if admission is not None else None
    streams: list[Stream] = [
        tracked(neurons.generate(r, hints), tracker, on_end) for r in internals
    ]
    return streams, admission


async def route(
    request: Request, internals: list[pb.GenerateRequest], hints: RouteHints | None = None
) -> list[Stream]:
    """Admit and start the internal requests of one API request; no stream
    is read."""
    streams, _ = await _route(request, internals, hints)
    return streams


@dataclass
class Started:
    """The neuron streams of one request, each with its first message read."""

    firsts: list[pb.GenerateResponse]
    streams: list[Stream]

    @property
    def only(self) -> tuple[pb.GenerateResponse, Stream]:
        """The one stream of a single-prompt request."""
        (first,), (stream,) = self.firsts, self.streams
        return first, stream


async def start(
    request: Request,
    internals: list[pb.GenerateRequest],
    hints: RouteHints | None = None,
    tokens_param: str | None = None,
) -> Started:
    """`tokens_param`: what the client called the output cap, where the API
    has several spellings (the caps' 400 names it)."""
    streams, admission = await _route(request, internals, hints, tokens_param)
    try:
        if len(streams) == 1:  # the common case, without a task per stream
            return Started([await anext(streams[0])], streams)
        return Started(await first_messages(streams), streams)
    except InvalidRequestError as e:
        if admission is not None:
            admission.release()
        raise in_surface_terms(e, _claimed(request)[1], tokens_param) from None
    except BaseException:
        if admission is not None:
            admission.release()  # a stream never read cannot settle its part
        raise


def in_surface_terms(
    error: InvalidRequestError, surface: Surface, tokens_param: str | None = None
) -> InvalidRequestError:
    """A neuron's refusal names the request's fields as the chat API spells
    them (it sees only the internal request): spelled as the client's API
    does (`/v1/responses`: input, max_output_tokens, text.format.schema)."""
    names = surface.params
    if names is None or error.param is None:
        return error
    spelling = {
        "messages": names.messages,
        "max_tokens": tokens_param or names.tokens,
        "response_format": names.schema,
    }.get(error.param)
    if spelling is None or spelling == error.param:
        return error
    message = error.message.replace(f"'{error.param}'", f"'{spelling}'")
    return type(error)(message, param=spelling)


async def unary(request: Request, model: str, call: Callable[[RouteHints], Awaitable[T]]) -> T:
    """One call that generates nothing (/tokenize, /detokenize) on a replica
    of `model`, tracked, counted toward the key's rpm and max_concurrent; a
    client that leaves cancels it. `call` gets the request's hints: its
    tenant (for its place in the admission queue) and where to tell how
    long it waited there (its ledger row's queue seconds)."""
    check_model(request, model)
    admission = await admit_request(request)
    tracker = _tracker(request, model)
    with _counted(tracker, admission):
        answer = await cancel_on_disconnect(request, call(_hints(request)))
    tracker.part_done(0, 0)
    return answer


def _hints(request: Request) -> RouteHints:
    """The hints of a request without affinity keys: its tenant, and where
    admission tells how long it waited."""
    context = context_of(request)
    return RouteHints(tenant=context.principal.tenant, waited=context.waited)


@contextmanager
def _counted(tracker: Tracker, admission: Admission | None) -> Iterator[None]:
    """A one-answer call's end: its outcome tracked if it fails, its
    admission released however it ends (a no-op once settled)."""
    try:
        yield
    except ClientDisconnectedError:
        # Nobody is waiting for an answer: the client cancelled, the server
        # did not fail (chat counts the same case through its stream).
        tracker.finish("cancelled")
        raise
    except Exception as e:
        tracker.finish(outcome_of(e))
        raise
    except BaseException:
        tracker.finish("cancelled")
        raise
    finally:
        if admission is not None:
            admission.release()


async def embed(request: Request, internal: pb.EmbedRequest) -> pb.EmbedResponse:
    """One embeddings request (its task already checked), tracked; a client
    that leaves cancels it."""
    check_model(request, internal.model)
    admission = await _admit(request, estimate_embed(internal), 1)
    tracker = _tracker(request, internal.model)
    with _counted(tracker, admission):
        embedded = gateway_of(request).neurons.embed(internal, _hints(request))
        response = await cancel_on_disconnect(request, embedded)
        if admission is not None:
            admission.part_ended(response.prompt_tokens)
    tracker.part_done(response.prompt_tokens, 0)
    return response
