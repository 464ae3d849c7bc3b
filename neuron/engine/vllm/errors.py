"""vLLM's and the chat template's exceptions, as the errors a client may see
(issue 31 point 7).

vLLM raises `VLLMValidationError` (or a plain `ValueError`) for what it
refuses in a request, in its own words: its parameter names, its settings
(`--max-logprobs`, `VLLM_MAX_N_SEQUENCES`), sometimes a model path; the same
classes also report its own configuration and its bugs. A chat template
refuses a conversation with Jinja's `TemplateError`. Only what is known here
to be the request's fault becomes a client error: one of `_RULES`, each a
message vLLM 0.32 raises (vllm/sampling_params.py, vllm/v1/engine/
input_processor.py, vllm/v1/structured_output/, vllm/pooling_params.py),
answered in our words with the field the client set, as OpenAI's chat API
names it. Anything else is not translated (`client_error` returns None): the
neuron's server logs it with the request id and answers INTERNAL, which
cortex turns into a 500 without the text.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from axon.errors import (
    ContextLengthExceededError,
    InternalError,
    InvalidRequestError,
    NeuraxisError,
    UnavailableError,
)
from neuron.engine.base import EngineRequest, ResponseFormatKind, ToolChoiceMode

log = logging.getLogger("neuraxis.neuron")

# What a dead engine core is called in errors and the health reason.
ENGINE_CORE_DIED = "vLLM's engine core process stopped"

# The most of a template's own refusal quoted back to the client.
TEMPLATE_MESSAGE_CHARS = 200

# Which field of the request a message is about.
Param = Callable[[EngineRequest | None], str]


def _named(name: str) -> Param:
    return lambda _: name


def _prompt(request: EngineRequest | None) -> str:
    return "prompt" if request is not None and request.prompt is not None else "messages"


def _logprobs(request: EngineRequest | None) -> str:
    # The chat API's logprobs is a flag and top_logprobs the count;
    # completions' logprobs is the count.
    return "logprobs" if request is not None and request.prompt is not None else "top_logprobs"


def constraint_param(request: EngineRequest | None) -> str:
    """The field that carried the schema or grammar vLLM could not use: the
    tools when a tool is forced (their schemas, a custom tool's grammar),
    else the response format."""
    forced = (ToolChoiceMode.REQUIRED, ToolChoiceMode.NAMED)
    if request is not None and request.tools and request.tool_choice.mode in forced:
        return "tools"
    return "response_format"


def _hasconstraint_param(request: EngineRequest | None) -> bool:
    """Whether the client gave a schema or grammar (a json_object format is
    ours: it has none)."""
    if request is None:
        return False
    if request.response_format.kind is ResponseFormatKind.JSON_SCHEMA:
        return True
    return constraint_param(request) == "tools"


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]  # searched in vLLM's message
    param: Param | None  # None: the field the pattern's first group names
    reason: str  # our words, after "Invalid '<param>': "
    context: bool = False  # the prompt does not fit: context_length_exceeded


def _rule(pattern: str, param: Param | str | None, reason: str, context: bool = False) -> _Rule:
    named = _named(param) if isinstance(param, str) else param
    return _Rule(re.compile(pattern), named, reason, context)


_SAMPLING_RANGE = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "max_tokens",
)

_RULES: tuple[_Rule, ...] = (
    _rule(
        r"^The (decoder|encoder) prompt \(length \d+\)",
        _prompt,
        "the prompt does not leave room in this model's context for one token of answer",
        context=True,
    ),
    _rule(r"^The decoder prompt cannot be empty", _prompt, "the prompt is empty"),
    _rule(
        r"^n must be 1 when using greedy sampling",
        "n",
        "more than one choice needs sampling (temperature above 0): with temperature 0 "
        "every choice would be the same",
    ),
    _rule(r"^n must be at most", "n", "more choices than this model server makes at once"),
    _rule(
        r"^Requested sample logprobs of",
        _logprobs,
        "more alternatives per token than this model server returns",
    ),
    _rule(r"^min_tokens must be", "min_tokens", "it is more than max_tokens"),
    _rule(
        rf"^({'|'.join(_SAMPLING_RANGE)}) must be",
        None,
        "the value is outside the range this model server takes",
    ),
    _rule(r"^stop cannot contain an empty string", "stop", "a stop sequence is empty"),
    _rule(
        r"^bad_words|^Too many bad words|^bad_words entries|were specified as bad",
        "bad_words",
        "a word is empty, makes no token, or has a token outside the model's vocabulary, "
        "or there are too many",
    ),
    _rule(
        r"in stop_token_ids contain out-of-vocab",
        "stop_token_ids",
        "a token id is outside the model's vocabulary",
    ),
    _rule(
        r"^allowed_token_ids",
        "allowed_token_ids",
        "it is empty, or a token id is outside the model's vocabulary",
    ),
    _rule(
        r"does not support Matryoshka|only supports (Matryoshka )?dimensions",
        "dimensions",
        "this model cannot shorten its embeddings to that many dimensions",
    ),
)

# Messages about a schema or grammar the client gave: what xgrammar, and the
# guidance and outlines backends vLLM falls back to, say of one they cannot
# turn into a grammar.
_CONSTRAINT = re.compile(
    r"^(Failed to transform (json schema|regex|choices) into a (grammar|regex)"
    r"|Invalid JSON grammar specification|Invalid grammar specification|Grammar error"
    r"|The provided JSON schema contains features not supported"
    r"|The JSON schema is nested too deeply"
    r"|No compatible structured output backend was found for this request"
    r"|structured_outputs\.(regex must not contain|grammar cannot be an empty"
    r"|json cannot be an empty))"
)
_CONSTRAINT_REASON = (
    "the model server cannot compile this schema or grammar: it is invalid, nested too "
    "deeply, or uses a feature the grammar compiler does not support"
)


def client_error(error: BaseException, request: EngineRequest | None) -> NeuraxisError | None:
    """The client's error for `error`, raised while vLLM or the chat template
    prepared `request` (None: an embedding request); None when the error is
    not known to be the request's fault."""
    from jinja2.exceptions import TemplateError
    from vllm.exceptions import VLLMClientError
    from vllm.v1.engine.exceptions import EngineGenerateError

    if isinstance(error, EngineGenerateError) and error.__cause__ is not None:
        # AsyncLLM.generate wraps what its input processing raised as a
        # plain ValueError; VLLMValidationError comes through as it is.
        error = error.__cause__
    if isinstance(error, TemplateError):
        return _template_error(error, request)
    if not isinstance(error, (VLLMClientError, ValueError)) or not error.args:
        return None
    message = str(error.args[0])
    if _CONSTRAINT.search(message) and _hasconstraint_param(request):
        param = constraint_param(request)
        return InvalidRequestError(f"Invalid '{param}': {_CONSTRAINT_REASON}.", param=param)
    for rule in _RULES:
        found = rule.pattern.search(message)
        if found is None:
            continue
        param = rule.param(request) if rule.param is not None else found.group(1)
        text = f"Invalid '{param}': {rule.reason}."
        if rule.context:
            return ContextLengthExceededError(text, param=param)
        return InvalidRequestError(text, param=param)
    return None


def _template_error(error: BaseException, request: EngineRequest | None) -> NeuraxisError | None:
    """A template that refuses the conversation (its `raise_exception`, whose
    words its authors wrote for users, quoted) or reads what a message does
    not have. A template that does not parse, or breaks its sandbox, is the
    model's fault, not the request's."""
    from jinja2.exceptions import TemplateError, UndefinedError

    param = _prompt(request)
    if type(error) is TemplateError and error.args:
        said = str(error.args[0])[:TEMPLATE_MESSAGE_CHARS]
        return InvalidRequestError(
            f"Invalid '{param}': the model's chat template refuses this conversation: {said}",
            param=param,
        )
    if isinstance(error, UndefinedError):
        return InvalidRequestError(
            f"Invalid '{param}': the model's chat template cannot render this conversation "
            "(a message lacks what the template expects of its role).",
            param=param,
        )
    return None


def engine_died() -> UnavailableError:
    return UnavailableError(f"the neuron's engine has died: {ENGINE_CORE_DIED}")


def failed_by_vllm(request_id: str) -> InternalError:
    """vLLM's finish reason "error": its request-level internal error (a
    grammar its engine core failed to compile, a KV-cache load that failed),
    which its own server always answers with a 500. Its log has the cause."""
    log.warning(
        "vLLM finished the request with an error (its log above has the cause)",
        extra={"request_id": request_id},
    )
    return InternalError("vLLM failed the request (finish reason 'error')")


def raise_translated(error: Exception, request: EngineRequest | None) -> NoReturn:
    """The client's error for what vLLM or the template raised, in our words
    (errors.py); anything not known to be the request's fault goes on as it
    is, for the server to log with the request id and answer INTERNAL."""
    translated = client_error(error, request)
    if translated is None:
        raise error
    raise translated from None
