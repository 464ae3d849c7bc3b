"""A simulated engine with configurable timing and faults.

An honest test double for what does not need a real model: routing, failover,
gateway overhead and error paths in tests and benchmarks. It produces words
("tok0 tok1 ..."), counts a token per word and a prompt token per
whitespace-separated word of the messages. Never the default engine.

With a `prefix_cache` capacity it also models vLLM's prefix cache and a
prefill proportional to the uncached prompt (`sim_cache.py`): prompt tokens
are then characters / chars_per_token, usage reports the cached ones, and
Load reports the requests queued for prefill as waiting.

With `max_adapters` it serves LoRA adapters as vLLM does (adapters.py: a
bounded set loaded on demand, the least recently used idle one evicted),
each load taking `adapter_load_s`; an adapter's words are prefixed with its
id ("ada:tok0 ada:tok1 ..."), so that a test can tell who answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from axon.adapters import AdapterSource
from axon.errors import EngineDiedError, InternalError, InvalidRequestError, ModelNotFoundError
from axon.process import interrupted_by_stop_signals
from axon.tasks import ModelTask
from neuron import tracing
from neuron.engine.adapters import Adapter, Adapters, ServesAdapters
from neuron.engine.base import (
    ChoiceDelta,
    EmbedRequest,
    EmbedResult,
    Engine,
    EngineLoad,
    EngineRequest,
    FinishReason,
    Output,
    ServedModel,
    Tokenized,
    TokenizeRequest,
    TokenLogprob,
    TopLogprob,
    Usage,
    check_context,
    wrong_task,
)
from neuron.engine.sim_cache import PrefillModel, PrefixCacheOptions
from neuron.engine.sim_slots import Slots

log = logging.getLogger("neuraxis.neuron")


@dataclass(frozen=True)
class SimOptions:
    served_id: str = "sim-model"
    max_context_length: int = 4096
    ttft_s: float = 0.01
    itl_s: float = 0.005
    # How long start() holds the event loop, in one synchronous call, as
    # vLLM's engine build does (a stop meanwhile must still end it).
    load_s: float = 0.0
    # Where the simulated model ends an answer that sets no max_tokens (a
    # real one stops at its end-of-sequence token), if default_max_tokens
    # or the context has not ended it sooner.
    default_tokens: int = 16
    # ServedModel.default_max_tokens (0: the remaining context).
    default_max_tokens: int = 0
    # After this many tokens the request fails with an internal error (a
    # crashing engine); None means never, 0 fails before the first token.
    fail_after_tokens: int | None = None
    # After this many tokens (counted over all requests) the whole engine dies,
    # as vLLM's does when its engine core process exits: every request in
    # flight fails, and so does every later one. None means never.
    die_after_tokens: int | None = None
    prefix_cache: PrefixCacheOptions = field(default_factory=PrefixCacheOptions)
    # Reported by Info as the engine's batch size (0: unknown); not enforced.
    max_concurrency: int = 0
    # EMBED: an embedding model (a vector per input, after ttft_s), which
    # generates nothing.
    task: ModelTask = ModelTask.GENERATE
    # Requests run at once (0: no limit); the rest wait, in arrival order or,
    # `by_priority`, by class first (vLLM's scheduling_policy = "priority").
    max_running: int = 0
    by_priority: bool = False
    # LoRA adapters held at once (0: none served), the ones it may serve,
    # and how long loading one takes.
    max_adapters: int = 0
    adapters: tuple[AdapterSource, ...] = ()
    adapter_load_s: float = 0.0


class SimEngine(ServesAdapters, Engine):
    def __init__(self, options: SimOptions) -> None:
        self._options = options
        self._running = 0
        self._tokens = 0
        self._slots = Slots(options.max_running, options.by_priority)
        self._death: str | None = None
        self.prefill = PrefillModel(options.prefix_cache, options.by_priority)
        self._model = ServedModel(
            id=options.served_id,
            max_context_length=options.max_context_length,
            task=options.task,
            created=int(time.time()),
            default_max_tokens=options.default_max_tokens,
        )
        self._adapters = (
            Adapters(self, options.max_adapters, options.adapters) if options.max_adapters else None
        )

    @property
    def description(self) -> str:
        return "sim"

    async def start(self) -> None:
        if self._options.load_s > 0:
            with interrupted_by_stop_signals():
                log.info("sim engine: loading for %g s", self._options.load_s)
                time.sleep(self._options.load_s)  # holding the loop is the point

    def models(self) -> list[ServedModel]:
        if self._adapters is None:
            return [self._model]
        return [self._model, *self._adapters.models(self._model)]

    async def attach(self, adapter: Adapter) -> None:
        await asyncio.sleep(self._options.adapter_load_s)

    async def detach(self, adapter: Adapter) -> None:
        return None

    def _adapter_of(self, model: str) -> str | None:
        """The adapter `model` names (None: the base model), or
        ModelNotFoundError."""
        if model == self._model.id:
            return None
        if self._adapters is not None and self._adapters.known(model):
            return model
        raise ModelNotFoundError(f"The model '{model}' does not exist on this neuron.")

    def load(self) -> EngineLoad:
        waiting = self.prefill.waiting  # counted in _running too: the engine has them
        return EngineLoad(running=self._running - waiting, waiting=waiting + self._slots.waiting)

    def max_concurrency(self) -> int:
        return self._options.max_concurrency

    def death_cause(self) -> str | None:
        return self._death

    def die(self, cause: str = "the simulated engine died") -> None:
        """The fault switch: from now on the engine serves nothing."""
        self._death = cause

    def _check_alive(self) -> None:
        if self._death is not None:
            raise EngineDiedError(f"the neuron's engine has died: {self._death}")

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        if self._adapter_of(request.model) is not None:
            raise InvalidRequestError(
                f"The model '{request.model}' is a LoRA adapter: adapters generate, "
                "and cannot embed.",
                param="model",
            )
        if self._model.task is not ModelTask.EMBED:
            raise wrong_task(request.model, ModelTask.GENERATE)
        self._check_alive()
        await asyncio.sleep(self._options.ttft_s)
        # A deterministic unit-ish vector per input: its length and word count.
        vectors, tokens = [], 0
        for item in request.inputs:
            words = len(item.split()) if isinstance(item, str) else len(item)
            tokens += words
            vectors.append([float(words), float(len(item)), 1.0][: request.dimensions or 3])
        return EmbedResult(embeddings=vectors, prompt_tokens=tokens)

    async def generate(self, request: EngineRequest) -> AsyncIterator[Output]:
        adapter = self._adapter_of(request.model)
        if self._model.task is not ModelTask.GENERATE:
            raise wrong_task(request.model, ModelTask.EMBED)
        self._check_alive()
        opts = self._options
        text_in = (
            request.prompt
            if request.prompt is not None
            else " ".join(m.content for m in request.messages)
        )
        with tracing.phase("prepare"):
            prompt_tokens = self.prefill.prompt_tokens(text_in)
        max_tokens = check_context(self._model, prompt_tokens, request.sampling.max_tokens)
        if request.sampling.max_tokens is None:
            max_tokens = min(max_tokens, opts.default_tokens)
        n = request.sampling.n
        async with contextlib.AsyncExitStack() as stack:
            if adapter is not None and self._adapters is not None:
                await stack.enter_async_context(self._adapters.using(adapter))
            await stack.enter_async_context(self._slots.slot(request.priority))
            words = _Words(f"{adapter}:" if adapter else "")
            async for output in self._run(request, prompt_tokens, max_tokens, n, text_in, words):
                yield output

    async def _run(
        self,
        request: EngineRequest,
        prompt_tokens: int,
        max_tokens: int,
        n: int,
        text_in: str,
        words: _Words,
    ) -> AsyncIterator[Output]:
        opts = self._options
        self._running += 1
        tracing.submitted()
        try:
            await asyncio.sleep(opts.ttft_s)
            cached = (await self.prefill.prefill(text_in, request.priority)).cached_tokens
            for i in range(max_tokens):
                if i == opts.fail_after_tokens:
                    raise InternalError("simulated engine failure")
                if i:
                    await asyncio.sleep(opts.itl_s)
                self._check_alive()
                self._tokens += 1
                if self._tokens == opts.die_after_tokens:
                    self.die(f"the simulated engine died after {self._tokens} tokens")
                text = words.word(i)
                last = i == max_tokens - 1
                finish = FinishReason.LENGTH if last else None
                logprobs = _logprobs(text, request.sampling.logprobs)
                choices = tuple(
                    ChoiceDelta(index=c, text=text, logprobs=logprobs, finish_reason=finish)
                    for c in range(n)
                )
                usage = Usage(prompt_tokens, max_tokens * n, cached) if last else None
                yield Output(choices=choices, usage=usage)
        finally:
            self._running -= 1

    async def tokenize(self, request: TokenizeRequest) -> Tokenized:
        self._check_model(request.model)
        text = request.prompt if request.prompt is not None else _sim_template(request)
        tokens = list(text.encode())
        if request.add_special_tokens:
            tokens.insert(0, SIM_BOS)
        strs = [_sim_token(t) for t in tokens] if request.return_token_strs else None
        return Tokenized(tokens, self._model.max_context_length, strs)

    async def detokenize(self, model: str, tokens: list[int]) -> str:
        self._check_model(model)
        unknown = [t for t in tokens if t > SIM_BOS]
        if unknown:
            raise InvalidRequestError(
                f"Token id {unknown[0]} is out of vocabulary (the model has {SIM_BOS + 1}).",
                param="tokens",
            )
        return b"".join(_sim_token(t).encode("latin-1") for t in tokens).decode(errors="replace")

    def _check_model(self, model: str) -> None:
        self._adapter_of(model)  # an adapter tokenizes as its base

    async def shutdown(self) -> None:
        return None


@dataclass(frozen=True)
class _Words:
    """The words the sim generates: tok0 tok1 ..., an adapter's prefixed."""

    prefix: str

    def word(self, i: int) -> str:
        return f"{self.prefix}tok{i}" if i == 0 else f" {self.prefix}tok{i}"


# The sim's tokenizer: a token per UTF-8 byte of the text (ids 0-255), and a
# beginning-of-sequence token; its chat template: `<|role|>content` lines.
SIM_BOS = 256


def _sim_token(token: int) -> str:
    return "<s>" if token == SIM_BOS else bytes([token]).decode("latin-1")


def _sim_template(request: TokenizeRequest) -> str:
    text = "".join(f"<|{m.role}|>{m.content}\n" for m in request.messages)
    if request.add_generation_prompt and not request.continue_final_message:
        text += "<|assistant|>"
    return text


def _logprobs(text: str, k: int | None) -> tuple[TokenLogprob, ...]:
    """The token's logprob with k alternatives (the token itself first, as
    an engine ranks the greedy choice), when the request asks for them."""
    if k is None:
        return ()
    tokens = [text, *(f" alt{j}" for j in range(1, k))][:k]
    top = tuple(TopLogprob(t, -0.25 * j, t.encode()) for j, t in enumerate(tokens))
    return (TokenLogprob(token=text, logprob=0.0, bytes=text.encode(), top=top),)
