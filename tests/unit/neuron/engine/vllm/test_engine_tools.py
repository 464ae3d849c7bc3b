"""The engine's output loop with tool_choice auto: vLLM's AsyncLLM replaced by
a scripted one that yields RequestOutput-shaped DELTA outputs (no model is
loaded), the model's tool parser vLLM's real hermes parser, chosen by name
as a neuron configures it. Each engine step's output is checked as the
neuron would send it."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from axon.generations import Generation
from neuron.engine.base import (
    EngineRequest,
    FinishReason,
    Message,
    Output,
    Tool,
    ToolChoice,
    ToolChoiceMode,
)
from neuron.engine.vllm.args import VllmOptions, engine_launch
from neuron.engine.vllm.engine import VllmEngine

TOOLS = (Tool(name="get_weather", parameters={"type": "object"}),)


@dataclass
class _Completion:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    logprobs: Any = None


@dataclass
class _RequestOutput:
    outputs: list[_Completion]
    finished: bool = False
    num_cached_tokens: int = 0


class _Tokenizer:
    """Enough of a tokenizer for rendering a prompt: one id per word."""

    def apply_chat_template(self, messages: list[dict[str, Any]], **_: Any) -> str:
        return " ".join(m["content"] for m in messages)

    def encode(self, text: str, **_: Any) -> list[int]:
        return list(range(len(text.split())))

    def get_vocab(self) -> dict[str, int]:
        return {}


@dataclass
class _ScriptedLLM:
    """AsyncLLM as the engine uses it, generating the scripted pieces of text
    (one engine step each; the last one finishes the choice)."""

    pieces: list[str]
    model_config: Any = field(
        default_factory=lambda: type("C", (), {"max_model_len": 2048, "is_matryoshka": False})()
    )
    errored: bool = False

    def get_tokenizer(self) -> _Tokenizer:
        return _Tokenizer()

    async def generate(self, prompt: Any, params: Any, request_id: str) -> AsyncIterator[Any]:
        for i, piece in enumerate(self.pieces):
            last = i == len(self.pieces) - 1
            completion = _Completion(0, piece, [i], "stop" if last else None)
            yield _RequestOutput([completion], finished=last)

    def shutdown(self) -> None:
        pass


async def _generate(pieces: list[str], monkeypatch: pytest.MonkeyPatch) -> list[Output]:
    from vllm.v1.engine.async_llm import AsyncLLM

    options = VllmOptions(served_id="m", model_path=Path("/models/m"), tool_parser="hermes")
    for name in engine_launch(options, Generation.CPU).env:
        # Set first so that monkeypatch restores what was there after the test.
        monkeypatch.setenv(name, os.environ.get(name, "unset"))
    monkeypatch.setattr(AsyncLLM, "from_engine_args", lambda args, **_: _ScriptedLLM(pieces))
    engine = VllmEngine(options)
    await engine.start()
    request = EngineRequest(
        request_id="r1",
        model="m",
        messages=(Message(role="user", content="Weather in Rome?"),),
        tools=TOOLS,
        tool_choice=ToolChoice(ToolChoiceMode.AUTO),
    )
    try:
        return [out async for out in engine.generate(request)]
    finally:
        await engine.shutdown()


async def test_auto_calls_leave_the_engine_step_by_step(monkeypatch: pytest.MonkeyPatch) -> None:
    pieces = [
        "Checking.",
        " <tool_call>",
        '\n{"name": "get_weather",',
        ' "arguments": {"city":',
        ' "Rome"',
        "}}\n",
        "</tool_call>",
    ]
    outputs = await _generate(pieces, monkeypatch)
    deltas = [(i, d) for i, out in enumerate(outputs) for d in out.choices]
    assert [d.text for _, d in deltas if d.text] == ["Checking.", " "]
    calls = [(i, c) for i, d in deltas for c in d.tool_calls]
    (step, named), *fragments = calls
    assert (named.index, named.name) == (0, "get_weather") and named.id.startswith("call_")
    # Named at the step that wrote the name, arguments over the next steps.
    assert step == 2 and [i for i, _ in fragments] == [3, 4, 5]
    arguments = named.arguments + "".join(c.arguments for _, c in fragments)
    assert json.loads(arguments) == {"city": "Rome"}
    assert outputs[-1].choices[-1].finish_reason is FinishReason.TOOL_CALLS
    assert outputs[-1].usage is not None


async def test_an_auto_answer_without_a_call_is_text(monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = await _generate(["It is ", "sunny <", "3"], monkeypatch)
    deltas = [d for out in outputs for d in out.choices]
    assert "".join(d.text for d in deltas) == "It is sunny <3"
    assert not any(d.tool_calls for d in deltas)
    assert deltas[-1].finish_reason is FinishReason.STOP
