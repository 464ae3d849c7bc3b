"""POST /v1/completions (legacy): raw text prompts, no chat template.

A list of prompts fans out to one generation per prompt; choice i of prompt p
is choice p * n + i, as OpenAI numbers them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

from fastapi import APIRouter, Request
from fastapi.responses import Response

from axon.errors import InternalError, InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from cortex.api import caps, dispatch, params
from cortex.api.answers import entries, json_answer
from cortex.api.choices import ChoiceState, collect, finish_reason, usage_of
from cortex.api.gateway import gateway_of
from cortex.api.route import ApiRoute
from cortex.api.streams import merge
from cortex.api.text_chunks import TextChunks
from cortex.http.disconnect import cancel_on_disconnect
from cortex.http.sse import Chunk, chunk_exclusions, chunk_response
from cortex.schemas.completions import (
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
)
from cortex.schemas.surfaces import COMPLETIONS

router = APIRouter(route_class=ApiRoute)


def to_generate_requests(body: CompletionRequest, request_id: str) -> list[pb.GenerateRequest]:
    params.reject_unsupported(body)
    shared = params.Generation(
        model=body.model,
        sampling=params.sampling_of(body, max_tokens=body.max_tokens, logprobs=body.logprobs),
        stream=body.stream,
        stream_options=body.stream_options is not None,
        priority=params.requested_class(body.priority, body.service_tier),
    )
    params.check(shared)
    if body.echo and body.logprobs is not None:
        raise InvalidRequestError(
            "'echo' together with 'logprobs' (log probabilities of the prompt) is not supported.",
            param="echo",
        )
    return [
        params.internal_request(shared, f"{request_id}-{i}", prompt=prompt)
        for i, prompt in enumerate(body.prompts())
    ]


@router.post("/v1/completions", response_model=None)
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    request_id = dispatch.claim(request, COMPLETIONS)
    internals = to_generate_requests(body, request_id)
    created = int(time.time())
    n = body.n or 1
    prompts = body.prompts()
    if body.echo:
        caps.check_echo(gateway_of(request).caps, prompts, n)
    started = await dispatch.start(request, internals)
    firsts, streams = started.firsts, started.streams
    base = Completion(id=request_id, created=created, model=body.model, choices=[])
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunks = _chunks(base, firsts, streams, prompts if body.echo else None, n, include_usage)
        return chunk_response(chunks, request_id, include_usage)
    results = await cancel_on_disconnect(
        request, asyncio.gather(*(collect(f, s) for f, s in zip(firsts, streams, strict=True)))
    )
    total = pb.Usage()
    for _, usage in results:
        _count(total, usage)

    def build() -> Completion:
        choices = []
        for p, (states, _) in enumerate(results):
            for i, state in sorted(states.items()):
                echo = prompts[p] if body.echo else ""
                choices.append(_choice(p * n + i, state, echo, body.logprobs is not None))
        return base.model_copy(update={"choices": choices, "usage": usage_of(total)})

    size = entries(total.completion_tokens, body.logprobs)
    return await json_answer(build, size, {"X-Request-Id": request_id})


def _count(total: pb.Usage, usage: pb.Usage) -> None:
    """Add one prompt's usage to the request's (each prompt is a generation
    of its own, streamed or not)."""
    total.prompt_tokens += usage.prompt_tokens
    total.completion_tokens += usage.completion_tokens
    total.cached_prompt_tokens += usage.cached_prompt_tokens


def _choice(index: int, state: ChoiceState, echo: str, with_logprobs: bool) -> CompletionChoice:
    text = echo + "".join(state.text)
    logprobs = _legacy_logprobs(state.logprobs, len(echo)) if with_logprobs else None
    return CompletionChoice(
        index=index,
        text=text,
        logprobs=logprobs,
        finish_reason=finish_reason(state.finish),
    )


def _legacy_logprobs(entries: Sequence[pb.TokenLogprob], offset: int) -> CompletionLogprobs:
    """The legacy shape: parallel lists, alternatives as {token: logprob}."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    return CompletionLogprobs(
        tokens=[e.token for e in entries],
        token_logprobs=[e.logprob for e in entries],
        top_logprobs=[{t.token: t.logprob for t in e.top} for e in entries],
        text_offset=offsets,
    )


async def _chunks(
    base: Completion,
    firsts: list[pb.GenerateResponse],
    streams: list[AsyncIterator[pb.GenerateResponse]],
    echo: list[str] | None,
    n: int,
    include_usage: bool,
) -> AsyncIterator[list[Chunk]]:
    """The prompts' streams as completion chunks, one group per neuron
    message (written in one piece, `sse.py`); errors are the stream
    wrapper's."""

    def chunk(
        index: int, text: str, finish: str | None, logprobs: CompletionLogprobs | None
    ) -> Completion:
        choice = CompletionChoice(index=index, text=text, finish_reason=finish, logprobs=logprobs)
        return base.model_copy(update={"choices": [choice]})

    texts = TextChunks(
        lambda index, text: chunk(index, text, None, None), chunk_exclusions(include_usage)
    )
    total = pb.Usage()
    offsets: dict[int, int] = {}
    group: list[Chunk] = []
    if echo is not None:
        for p, prompt in enumerate(echo):
            for i in range(n):
                offsets[p * n + i] = len(prompt)
                group.append(chunk(p * n + i, prompt, None, None))
    ended = 0
    async for p, response in merge(firsts, streams):
        for delta in response.choices:
            index = p * n + delta.index
            finish = finish_reason(delta.finish_reason) if delta.finish_reason else None
            logprobs = None
            if delta.logprobs:
                logprobs = _legacy_logprobs(list(delta.logprobs), offsets.get(index, 0))
            offsets[index] = offsets.get(index, 0) + len(delta.text)
            if finish or logprobs:
                group.append(chunk(index, delta.text, finish, logprobs))
            elif delta.text:
                group.append(texts.chunk(index, delta.text))
        if response.HasField("usage"):
            ended += 1
            _count(total, response.usage)
        yield group
        group = []
    if ended < len(streams):
        raise InternalError("The stream ended early.")
    if include_usage:
        group.append(base.model_copy(update={"usage": usage_of(total)}))
    yield group
