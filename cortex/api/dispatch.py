"""Handing an API request's internal requests to the pool, observed by one
request tracker (metrics and the request's log line).

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

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request

from cortex import metrics
from cortex.api import caps
from cortex.api.streams import first_messages
from cortex.auth.limiter import Admission, Limiter, estimate_embed, estimate_generate
from cortex.auth.principal import principal_of
from cortex.http.disconnect import ClientDisconnectedError, cancel_on_disconnect
from cortex.routing.policy import RouteHints
from cortex.routing.pool import NeuronPool
from neuraxis.core.v1 import neuron_pb2 as pb

Stream = AsyncIterator[pb.GenerateResponse]

# The path each API is served on, as the pool names it in a wrong-task error.
_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
}


def new_request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def check_model(request: Request, model: str) -> None:
    """404 for a model the caller's key may not use, as if it did not exist."""
    principal_of(request).check_model(model)


async def _admit(request: Request, tokens: int, parts: int) -> Admission | None:
    """Reserve the request against its key's limits (None: no limits)."""
    limiter: Limiter | None = getattr(request.app.state, "limiter", None)
    principal = principal_of(request)
    if limiter is None or principal.key_id is None or not principal.limits.any:
        return None
    admission = await limiter.admit(principal, tokens, parts)
    request.state.ratelimit = admission.headers
    return admission


async def _route(
    request: Request,
    api: str,
    model: str,
    request_id: str,
    internals: list[pb.GenerateRequest],
    hints: RouteHints | None,
    tokens_param: str | None = None,
) -> tuple[list[Stream], Admission | None]:
    pool: NeuronPool = request.app.state.pool
    check_model(request, model)
    pool.check_task(model, pb.MODEL_TASK_GENERATE, _PATHS[api])
    info = pool.served_models().get(model)
    context = info.max_context_length if info is not None else 0
    caps.check_generate(request.app.state.caps, api, internals, context, tokens_param)
    tokens = sum(estimate_generate(r, context) for r in internals)
    admission = await _admit(request, tokens, len(internals))
    tracker = metrics.start(api, pool.model_label(model), request_id, parts=len(internals))
    request.state.tracked = True  # the error handlers must not count it again
    request.state.request_id = request_id  # a 500 names it (api/errors.py)
    # `hints` (the request's affinity keys) go to the routing policy of each.
    on_end = admission.stream_ended if admission is not None else None
    streams = [metrics.tracked(pool.generate(r, hints), tracker, on_end) for r in internals]
    return streams, admission


async def route(
    request: Request,
    api: str,
    model: str,
    request_id: str,
    internals: list[pb.GenerateRequest],
    hints: RouteHints | None = None,
) -> list[Stream]:
    """Admit and start the internal requests of one API request; no stream
    is read."""
    streams, _ = await _route(request, api, model, request_id, internals, hints)
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
    api: str,
    model: str,
    request_id: str,
    internals: list[pb.GenerateRequest],
    hints: RouteHints | None = None,
    tokens_param: str | None = None,
) -> Started:
    """`tokens_param`: what the client called the output cap, where the API
    has several spellings (the caps' 400 names it)."""
    streams, admission = await _route(
        request, api, model, request_id, internals, hints, tokens_param
    )
    try:
        if len(streams) == 1:  # the common case, without a task per stream
            return Started([await anext(streams[0])], streams)
        return Started(await first_messages(streams), streams)
    except BaseException:
        if admission is not None:
            admission.release()  # a stream never read cannot settle its part
        raise


async def embed(request: Request, internal: pb.EmbedRequest) -> pb.EmbedResponse:
    """One embeddings request (its task already checked), tracked; a client
    that leaves cancels it."""
    pool: NeuronPool = request.app.state.pool
    check_model(request, internal.model)
    admission = await _admit(request, estimate_embed(internal), 1)
    tracker = metrics.start("embeddings", pool.model_label(internal.model), internal.request_id)
    request.state.tracked = True
    request.state.request_id = internal.request_id
    try:
        response = await cancel_on_disconnect(request, pool.embed(internal))
        if admission is not None:
            admission.part_ended(response.prompt_tokens)
    except ClientDisconnectedError:
        # Nobody is waiting for an answer: the client cancelled, the server
        # did not fail (chat counts the same case through its stream).
        tracker.finish("cancelled")
        raise
    except Exception as e:
        tracker.finish(metrics.outcome_of(e))
        raise
    except BaseException:
        tracker.finish("cancelled")
        raise
    finally:
        if admission is not None:
            admission.release()  # no-op once settled with its usage
    tracker.part_done(response.prompt_tokens, 0)
    return response
