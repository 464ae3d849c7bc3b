"""What chat and legacy completions share when turning the neuron's stream
into choices: finish reasons, usage, log probabilities, and collecting a
whole choice for a non-streamed answer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import overload

from axon.errors import UnavailableError
from axon.v1 import neuron_pb2 as pb
from cortex.api.streams import next_message
from cortex.schemas.common import (
    CompletionUsage,
    PromptTokensDetails,
    TokenLogprobOut,
    TopLogprobOut,
)

_FINISH = {
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_LENGTH: "length",
    pb.FINISH_REASON_TOOL_CALLS: "tool_calls",
}


def finish_reason(reason: pb.FinishReason) -> str:
    name = _FINISH.get(reason)
    if name is None:
        # The engine aborted the request (e.g. it was shutting down).
        raise UnavailableError("The model server aborted the request; please retry.")
    return name


def usage_of(usage: pb.Usage) -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.prompt_tokens + usage.completion_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached_prompt_tokens),
    )


def logprobs_out(entries: Sequence[pb.TokenLogprob]) -> list[TokenLogprobOut]:
    return [
        TokenLogprobOut(
            token=e.token,
            logprob=e.logprob,
            bytes=list(e.bytes),
            top_logprobs=[
                TopLogprobOut(token=t.token, logprob=t.logprob, bytes=list(t.bytes)) for t in e.top
            ],
        )
        for e in entries
    ]


class PackedLogprobs(Sequence[pb.TokenLogprob]):
    """A choice's token logprobs, kept serialized until its answer is built.

    protobuf's Python message objects are walked by every full garbage
    collection, and such a collection holds the GIL: 24,000 of them (one
    answer: 6 choices of 4,000 tokens with 20 alternatives) made each one
    take 20-40 ms, while the answer's builder thread made one after another
    and the event loop waited. Bytes are not walked; each entry is parsed
    again as it is read, a slice at a time (cortex/api/answers.py)."""

    def __init__(self) -> None:
        self._entries: list[bytes] = []

    def extend(self, entries: Iterable[pb.TokenLogprob]) -> None:
        self._entries.extend(e.SerializeToString() for e in entries)

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> pb.TokenLogprob: ...

    @overload
    def __getitem__(self, index: slice) -> list[pb.TokenLogprob]: ...

    def __getitem__(self, index: int | slice) -> pb.TokenLogprob | list[pb.TokenLogprob]:
        if isinstance(index, slice):
            return [pb.TokenLogprob.FromString(e) for e in self._entries[index]]
        entry: pb.TokenLogprob = pb.TokenLogprob.FromString(self._entries[index])
        return entry


@dataclass
class CallState:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class ChoiceState:
    """Everything one choice has produced so far."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, CallState] = field(default_factory=dict)
    logprobs: PackedLogprobs = field(default_factory=PackedLogprobs)
    finish: pb.FinishReason = pb.FINISH_REASON_UNSPECIFIED

    def add(self, delta: pb.ChoiceDelta) -> None:
        if delta.text:
            self.text.append(delta.text)
        if delta.reasoning:
            self.reasoning.append(delta.reasoning)
        for call in delta.tool_calls:
            state = self.calls.setdefault(call.index, CallState())
            state.id = state.id or call.id
            state.name = state.name or call.name
            state.arguments.append(call.arguments)
        self.logprobs.extend(delta.logprobs)
        if delta.finish_reason:
            self.finish = delta.finish_reason


async def collect(
    first: pb.GenerateResponse, rest: AsyncIterator[pb.GenerateResponse]
) -> tuple[dict[int, ChoiceState], pb.Usage]:
    """Read the whole stream: every choice's state, and the usage."""
    states: dict[int, ChoiceState] = {}
    response = first
    while True:
        for delta in response.choices:
            states.setdefault(delta.index, ChoiceState()).add(delta)
        if response.HasField("usage"):
            return states, response.usage
        response = await next_message(rest)
