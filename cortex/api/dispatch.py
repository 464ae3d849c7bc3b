"""Handing an API request's internal requests to the pool, observed by one
request tracker (metrics and the request's log line).

`route` checks the model's task and starts the neuron streams; `start` also
waits for each stream's first message, so that an error raised before
generation starts (bad model, prompt too long, no neuron) becomes the HTTP
status instead of an error inside a 200 stream. `embed` is the unary
counterpart. What the streams become on the wire is the endpoints' business.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import Request

from cortex import metrics
from cortex.api.disconnect import ClientDisconnectedError, cancel_on_disconnect
from cortex.api.streams import first_messages
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


def route(
    request: Request, api: str, model: str, request_id: str, internals: list[pb.GenerateRequest]
) -> list[Stream]:
    """Start the internal requests of one API request; nothing is awaited."""
    pool: NeuronPool = request.app.state.pool
    pool.check_task(model, pb.MODEL_TASK_GENERATE, _PATHS[api])
    tracker = metrics.start(api, pool.model_label(model), request_id, parts=len(internals))
    request.state.tracked = True  # the error handlers must not count it again
    return [metrics.tracked(pool.generate(r), tracker) for r in internals]


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
    request: Request, api: str, model: str, request_id: str, internals: list[pb.GenerateRequest]
) -> Started:
    streams = route(request, api, model, request_id, internals)
    if len(streams) == 1:  # the common case, without a task per stream
        return Started([await anext(streams[0])], streams)
    return Started(await first_messages(streams), streams)


async def embed(request: Request, internal: pb.EmbedRequest) -> pb.EmbedResponse:
    """One embeddings request (its task already checked), tracked; a client
    that leaves cancels it."""
    pool: NeuronPool = request.app.state.pool
    tracker = metrics.start("embeddings", pool.model_label(internal.model), internal.request_id)
    request.state.tracked = True
    try:
        response = await cancel_on_disconnect(request, pool.embed(internal))
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
    tracker.part_done(response.prompt_tokens, 0)
    return response
