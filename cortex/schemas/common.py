"""Wire types shared by several OpenAI surfaces."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar, Generic, Protocol, Self, TypeVar

from pydantic import BaseModel, Field, ModelWrapValidatorHandler, PrivateAttr, model_validator

from axon.priority import PriorityClass

Stop = str | Annotated[list[str], Field(max_length=4)] | None

# Integers that travel in a protobuf field of neuron.proto must fit it: past
# its range the encoder raises, and the request would end in a 500 instead of
# a 400 naming the parameter.
UINT32_END = 2**32
Int64 = Annotated[int, Field(ge=-(2**63), lt=2**63)]
# A token count (max_tokens and its spellings): at least one, a uint32.
TokenCount = Annotated[int, Field(ge=1, lt=UINT32_END)]
# A request's `priority`: vLLM's integer (lower runs first: below 0
# interactive, 0 default, above 0 batch) or a class's name
# (cortex/api/params.py `requested_class`).
Priority = Annotated[int, Field(ge=-(2**31), lt=2**31)] | PriorityClass


class RefusesUnsupported(BaseModel):
    """A request that takes the fields OpenAI defines and this server does
    not serve (`UNSUPPORTED`) out of validation and keeps their names, so
    that the endpoint can refuse them with a 400 naming the field instead of
    answering as if they were not there. A false flag asks for nothing."""

    UNSUPPORTED: ClassVar[tuple[str, ...]] = ()
    _unsupported: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _set_aside(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        names: list[str] = []
        if isinstance(data, dict) and cls.UNSUPPORTED:
            names = [n for n in cls.UNSUPPORTED if data.get(n) is not None and data[n] is not False]
            data = {k: v for k, v in data.items() if k not in cls.UNSUPPORTED}
        model = handler(data)
        model._unsupported = names
        return model

    @property
    def unsupported(self) -> list[str]:
        """The unsupported fields the request set, in UNSUPPORTED's order."""
        return self._unsupported


class SamplingFields(BaseModel):
    """The sampling fields chat and legacy completions both accept, under
    the same names as the internal SamplingParams (stop aside: a string or
    a list on the wire)."""

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=-1, lt=2**31)] | None = None  # a vLLM extension
    n: Annotated[int, Field(ge=1, le=16)] | None = None
    seed: Int64 | None = None
    stop: Stop = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None


class PromptTokensDetails(BaseModel):
    cached_tokens: int


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class TopLogprobOut(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobOut(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprobOut]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprobOut] | None
    refusal: None = None


def stop_list(stop: Stop) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def only_text_parts(*kinds: str) -> Callable[[Any], Any]:
    """A `mode="before"` validator of a content list: its parts must all be
    of the text `kinds` (the models served read text only); checked before
    pydantic picks a part type, so that the error names the unsupported one."""

    def check(value: Any) -> Any:
        if isinstance(value, list):
            for part in value:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind not in kinds:
                    allowed = " and ".join(f"'{k}'" for k in kinds)
                    raise ValueError(
                        f"content parts of type '{kind}' are not supported by this model; "
                        f"only {allowed} parts are"
                    )
        return value

    return check


class _HasText(Protocol):
    @property
    def text(self) -> str: ...


def joined_text(content: str | Sequence[_HasText] | None) -> str:
    """A message's content as one text: a string as it is, text parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content)


class FunctionFields(BaseModel):
    """A function tool's definition, the same in chat and Responses."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


_Choice = TypeVar("_Choice", bound=BaseModel)


class CompletionObject(BaseModel, Generic[_Choice]):
    """Every chat and legacy completion object and chunk: each names its own
    `object` and kind of choice (and a full chat completion always has its
    usage)."""

    id: str
    object: str
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[_Choice]
    usage: CompletionUsage | None = None
