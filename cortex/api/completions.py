"""POST /v1/completions (legacy): raw text prompts, no chat template.

A list of prompts fans out to one generation per prompt; choice i of prompt p
is choice p * n + i, as OpenAI numbers them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from cortex.api import generation
from cortex.api.choices import ChoiceState, collect, finish_reason, usage_of
from cortex.api.disconnect import cancel_on_disconnect
from cortex.api.errors import error_envelope
from cortex.api.streams import first_messages, merge
from cortex.routing.pool import NeuronPool
from cortex.schemas.common import stop_list
from cortex.schemas.completions import (
    UNSUPPORTED_FIELDS,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
)
from cortex.sse import DONE, data_frame
from neuraxis.core.errors import InternalError, InvalidRequestError, NeuraxisError
from neuraxis.core.v1 import neuron_pb2 as pb

router = APIRouter()


def to_generate_requests(body: CompletionRequest, request_id: str) -> list[pb.GenerateRequest]:
    for name in UNSUPPORTED_FIELDS:
        if getattr(body, name) is not None:
            raise InvalidRequestError(f"'{name}' is not supported by this server.", param=name)
    if body.stream_options is not None and not body.stream:
        raise InvalidRequestError(
            "The 'stream_options' parameter is only allowed when 'stream' is true.",
            param="stream_options",
        )
    if body.echo and body.logprobs is not None:
        raise InvalidRequestError(
            "'echo' together with 'logprobs' (log probabilities of the prompt) is not supported.",
            param="echo",
        )
    sampling = pb.SamplingParams(
        stop=stop_list(body.stop),
        max_tokens=body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        seed=body.seed,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        n=body.n,
        logprobs=body.logprobs,
    )
    return [
        pb.GenerateRequest(
            request_id=f"{request_id}-{i}", model=body.model, prompt=prompt, sampling=sampling
        )
        for i, prompt in enumerate(body.prompts())
    ]


@router.post("/v1/completions", response_model=None)
async def create_completion(
    body: CompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    pool: NeuronPool = request.app.state.pool
    request_id = f"cmpl-{uuid.uuid4().hex}"
    internals = to_generate_requests(body, request_id)
    pool.check_task(body.model, pb.MODEL_TASK_GENERATE, "/v1/completions")
    created = int(time.time())
    n = body.n or 1
    prompts = body.prompts()
    streams = generation.dispatch(request, "completions", body.model, request_id, internals)
    firsts = await first_messages(streams)
    headers = {"X-Request-Id": request_id}
    base = Completion(id=request_id, created=created, model=body.model, choices=[])
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        frames = _stream(base, firsts, streams, prompts if body.echo else None, n, include_usage)
        return StreamingResponse(frames, media_type="text/event-stream", headers=headers)
    results = await cancel_on_disconnect(
        request, asyncio.gather(*(collect(f, s) for f, s in zip(firsts, streams, strict=True)))
    )
    choices = []
    for p, (states, _) in enumerate(results):
        for i, state in sorted(states.items()):
            echo = prompts[p] if body.echo else ""
            choices.append(_choice(p * n + i, state, echo, body.logprobs is not None))
    usages = [usage for _, usage in results]
    total = pb.Usage(
        prompt_tokens=sum(u.prompt_tokens for u in usages),
        completion_tokens=sum(u.completion_tokens for u in usages),
        cached_prompt_tokens=sum(u.cached_prompt_tokens for u in usages),
    )
    completion = base.model_copy(update={"choices": choices, "usage": usage_of(total)})
    return JSONResponse(completion.model_dump(), headers=headers)


def _choice(index: int, state: ChoiceState, echo: str, with_logprobs: bool) -> CompletionChoice:
    text = echo + "".join(state.text)
    logprobs = _legacy_logprobs(state.logprobs, len(echo)) if with_logprobs else None
    return CompletionChoice(
        index=index,
        text=text,
        logprobs=logprobs,
        finish_reason=finish_reason(state.finish),  # type: ignore[arg-type]
    )


def _legacy_logprobs(entries: list[pb.TokenLogprob], offset: int) -> CompletionLogprobs:
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


async def _stream(
    base: Completion,
    firsts: list[pb.GenerateResponse],
    streams: list[AsyncIterator[pb.GenerateResponse]],
    echo: list[str] | None,
    n: int,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    exclude = None if include_usage else {"usage"}

    def frame(
        index: int, text: str, finish: str | None, logprobs: CompletionLogprobs | None
    ) -> bytes:
        choice = CompletionChoice(index=index, text=text, finish_reason=finish, logprobs=logprobs)  # type: ignore[arg-type]
        return data_frame(
            base.model_copy(update={"choices": [choice]}).model_dump_json(exclude=exclude)
        )

    prompt_tokens = completion_tokens = cached = 0
    offsets: dict[int, int] = {}
    try:
        if echo is not None:
            for p, prompt in enumerate(echo):
                for i in range(n):
                    offsets[p * n + i] = len(prompt)
                    yield frame(p * n + i, prompt, None, None)
        async for p, response in merge(firsts, streams):
            for delta in response.choices:
                index = p * n + delta.index
                finish = finish_reason(delta.finish_reason) if delta.finish_reason else None
                logprobs = None
                if delta.logprobs:
                    logprobs = _legacy_logprobs(list(delta.logprobs), offsets.get(index, 0))
                offsets[index] = offsets.get(index, 0) + len(delta.text)
                if delta.text or finish or logprobs:
                    yield frame(index, delta.text, finish, logprobs)
            if response.HasField("usage"):
                prompt_tokens += response.usage.prompt_tokens
                completion_tokens += response.usage.completion_tokens
                cached += response.usage.cached_prompt_tokens
        if include_usage:
            usage = usage_of(
                pb.Usage(
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    cached_prompt_tokens=cached,
                )
            )
            yield data_frame(base.model_copy(update={"usage": usage}).model_dump_json())
    except NeuraxisError as e:
        yield data_frame(error_envelope(e).model_dump_json())
    except Exception:
        error = InternalError("The server had an error while processing your request.")
        yield data_frame(error_envelope(error).model_dump_json())
    yield DONE
