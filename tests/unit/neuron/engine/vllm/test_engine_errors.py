"""What VllmEngine.generate and embed raise when vLLM or the chat template
refuses a request (issue 31 point 7), and the max_tokens it gives vLLM when
the request sets none (point 3): AsyncLLM replaced by a scripted one that
records the SamplingParams it gets and raises what it is told to; the
SamplingParams themselves are vLLM's, with their own checks."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from axon.errors import InternalError, InvalidRequestError
from axon.generations import Generation
from axon.tasks import ModelTask
from neuron.engine.base import (
    EmbedRequest,
    EngineRequest,
    Message,
    ResponseFormat,
    ResponseFormatKind,
    Sampling,
)
from neuron.engine.vllm.args import VllmOptions, engine_launch
from neuron.engine.vllm.engine import VllmEngine
from neuron.engine.vllm.grammar_probe import GrammarProbe
from tests.unit.neuron.engine.vllm.probe_fakes import held_compiler

CONTEXT = 2048


class _Tokenizer:
    """One id per word; its template raises `template_error` when set."""

    def __init__(self) -> None:
        self.template_error: Exception | None = None

    def apply_chat_template(self, messages: list[dict[str, Any]], **_: Any) -> str:
        if self.template_error is not None:
            raise self.template_error
        return " ".join(m["content"] for m in messages)

    def encode(self, text: str, **_: Any) -> list[int]:
        return list(range(len(text.split())))


@dataclass
class _Completion:
    index: int = 0
    text: str = "ok"
    token_ids: list[int] = field(default_factory=lambda: [1])
    finish_reason: str | None = "stop"
    logprobs: Any = None


@dataclass
class _Output:
    outputs: list[_Completion] = field(default_factory=lambda: [_Completion()])
    finished: bool = True
    num_cached_tokens: int = 0


@dataclass
class _ScriptedLLM:
    """AsyncLLM as the engine uses it: one finished output, or `error`
    raised where AsyncLLM raises its request's validation errors."""

    tokenizer: _Tokenizer = field(default_factory=_Tokenizer)
    error: Exception | None = None
    finish_reason: str = "stop"
    params: list[Any] = field(default_factory=list)
    errored: bool = False
    model_config: Any = field(
        default_factory=lambda: type("C", (), {"max_model_len": CONTEXT, "is_matryoshka": False})()
    )

    def get_tokenizer(self) -> _Tokenizer:
        return self.tokenizer

    async def generate(self, prompt: Any, params: Any, request_id: str) -> AsyncIterator[Any]:
        self.params.append(params)
        if self.error is not None:
            raise self.error
        yield _Output([_Completion(finish_reason=self.finish_reason)])

    async def encode(self, prompt: Any, params: Any, request_id: str) -> AsyncIterator[Any]:
        if self.error is not None:
            raise self.error
        yield None

    def shutdown(self) -> None:
        pass


@pytest.fixture
async def engine(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[VllmEngine, _ScriptedLLM]]:
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = _ScriptedLLM()
    options = VllmOptions(served_id="m", model_path=Path("/models/m"))
    for name in engine_launch(options, Generation.CPU).env:
        # Set first so that monkeypatch restores what was there after the test.
        monkeypatch.setenv(name, os.environ.get(name, "unset"))
    monkeypatch.setattr(AsyncLLM, "from_engine_args", lambda args, **_: llm)
    served = VllmEngine(options, default_max_tokens=100)
    await served.start()
    try:
        yield served, llm
    finally:
        await served.shutdown()


def _request(words: int = 3, **sampling: Any) -> EngineRequest:
    content = " ".join(["w"] * words)
    return EngineRequest(
        request_id="r1",
        model="m",
        messages=(Message("user", content),),
        sampling=Sampling(**sampling),
    )


async def _run(engine: VllmEngine, request: EngineRequest) -> None:
    async for _ in engine.generate(request):
        pass


async def test_a_missing_max_tokens_reaches_vllm_as_the_default(
    engine: tuple[VllmEngine, _ScriptedLLM],
) -> None:
    served, llm = engine
    await _run(served, _request(words=3))
    await _run(served, _request(words=CONTEXT - 10))
    await _run(served, _request(words=3, max_tokens=500))
    assert [p.max_tokens for p in llm.params] == [100, 10, 500]
    assert served.models()[0].default_max_tokens == 100


async def test_vllms_refusal_of_a_sampling_value_names_the_field(
    engine: tuple[VllmEngine, _ScriptedLLM],
) -> None:
    served, _ = engine
    with pytest.raises(InvalidRequestError) as raised:
        await _run(served, _request(n=2, temperature=0.0))
    assert raised.value.param == "n" and "greedy" not in raised.value.message


async def test_vllms_refusal_at_admission_names_the_field_in_openais_terms(
    engine: tuple[VllmEngine, _ScriptedLLM],
) -> None:
    from vllm.exceptions import VLLMValidationError

    served, llm = engine
    llm.error = VLLMValidationError(
        "Requested sample logprobs of 30, which is greater than max allowed: 20",
        parameter="logprobs",
        value=30,
    )
    with pytest.raises(InvalidRequestError) as raised:
        await _run(served, _request(logprobs=30))
    assert raised.value.param == "top_logprobs"
    assert "max allowed" not in raised.value.message


async def test_any_other_value_error_is_not_made_the_clients(
    engine: tuple[VllmEngine, _ScriptedLLM],
) -> None:
    served, llm = engine
    llm.error = ValueError("sampling distribution replay requires temperature > 0")
    # Left as it is: the server logs it with the request id and answers INTERNAL.
    with pytest.raises(ValueError, match="sampling distribution replay"):
        await _run(served, _request())


async def test_a_request_vllm_finishes_with_an_error_is_internal_not_an_empty_answer(
    engine: tuple[VllmEngine, _ScriptedLLM], caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM's finish reason "error" (a grammar its engine core failed to
    compile, a KV-cache load that failed) is its request-level internal
    error: it was read as "stop", an empty answer."""
    served, llm = engine
    llm.finish_reason = "error"
    with pytest.raises(InternalError):
        await _run(served, _request())
    assert [getattr(r, "request_id", None) for r in caplog.records] == ["r1"]


async def test_a_template_that_refuses_the_conversation_names_the_messages(
    engine: tuple[VllmEngine, _ScriptedLLM],
) -> None:
    from jinja2.exceptions import TemplateError, TemplateSyntaxError

    served, llm = engine
    llm.tokenizer.template_error = TemplateError("System role not supported")
    with pytest.raises(InvalidRequestError) as raised:
        await _run(served, _request())
    assert raised.value.param == "messages"
    assert raised.value.message.endswith("refuses this conversation: System role not supported")
    llm.tokenizer.template_error = TemplateSyntaxError("unexpected '}'", 1)
    with pytest.raises(TemplateSyntaxError):
        await _run(served, _request())


async def test_a_schema_past_the_compile_bound_never_reaches_vllm(
    engine: tuple[VllmEngine, _ScriptedLLM], tmp_path: Path
) -> None:
    """The probe (grammar_probe.py) kills a compile past its bound: the
    request is a 400 naming where the schema came from, and vLLM, which
    would not stop compiling it, never gets it."""
    served, llm = engine
    probe = GrammarProbe(0.5, str(tmp_path / "release"), held_compiler)
    served._probe = probe
    held = ResponseFormat(ResponseFormatKind.JSON_SCHEMA, {"type": "object", "title": "held"})
    quick = ResponseFormat(ResponseFormatKind.JSON_SCHEMA, {"type": "object"})
    try:
        await _run(served, replace(_request(), response_format=quick))
        assert len(llm.params) == 1
        with pytest.raises(InvalidRequestError) as raised:
            await _run(served, replace(_request(), response_format=held))
    finally:
        probe.close()
    assert raised.value.param == "response_format" and "0.5 s" in raised.value.message
    assert len(llm.params) == 1


async def test_an_embedding_dimension_the_model_refuses_names_dimensions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = _ScriptedLLM(
        model_config=type("C", (), {"max_model_len": 512, "is_matryoshka": True})(),
        error=VLLMValidationError(
            "Model '/var/lib/neuraxis/models/e' only supports dimensions in range [1, 384], "
            "got 1000."
        ),
    )
    options = VllmOptions(served_id="e", model_path=Path("/models/e"), task=ModelTask.EMBED)
    for name in engine_launch(options, Generation.CPU).env:
        monkeypatch.setenv(name, os.environ.get(name, "unset"))
    monkeypatch.setattr(AsyncLLM, "from_engine_args", lambda args, **_: llm)
    served = VllmEngine(options)
    await served.start()
    try:
        with pytest.raises(InvalidRequestError) as raised:
            await served.embed(EmbedRequest("r1", "e", ("a b",), dimensions=1000))
    finally:
        await served.shutdown()
    assert raised.value.param == "dimensions" and "/var/lib" not in raised.value.message
