"""vLLM's and the chat template's exceptions as clients see them (issue 31
point 7): real exceptions, raised by vLLM's own checks and by Hugging Face's
template renderer where that is cheap, otherwise vLLM 0.32's texts copied
from its sources. A known client mistake is a typed error from the table
naming the field as OpenAI's chat API does, with none of vLLM's wording;
anything else is not the client's (None: the server answers INTERNAL)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from axon.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    NeuraxisError,
    mapping_for,
)
from neuron.engine.base import (
    EngineRequest,
    Message,
    ResponseFormat,
    ResponseFormatKind,
    Tool,
    ToolChoice,
    ToolChoiceMode,
)
from neuron.engine.vllm.errors import client_error

CHAT = EngineRequest(request_id="r", model="m", messages=(Message("user", "hi"),))
SCHEMA = EngineRequest(
    request_id="r",
    model="m",
    messages=(Message("user", "hi"),),
    response_format=ResponseFormat(ResponseFormatKind.JSON_SCHEMA, {"type": "object"}),
)
FORCED_TOOL = EngineRequest(
    request_id="r",
    model="m",
    messages=(Message("user", "hi"),),
    tools=(Tool(name="f", parameters={"type": "object"}),),
    tool_choice=ToolChoice(ToolChoiceMode.REQUIRED),
)
JSON_OBJECT = EngineRequest(
    request_id="r",
    model="m",
    messages=(Message("user", "hi"),),
    response_format=ResponseFormat(ResponseFormatKind.JSON_OBJECT),
)
COMPLETION = EngineRequest(request_id="r", model="m", prompt="")

# What vLLM's words look like: its settings and environment, its source
# files, a path, a traceback, an exception's repr.
ENGINE_WORDING = re.compile(
    r"VLLM_|--max|max_logprobs|greedy|\.cc\b|/project|/usr/|/home/|Traceback|Error\(|"
    r"xgrammar|structured_outputs|parameter=|vocabulary size|Vocabulary size",
    re.IGNORECASE,
)


def _sampling_error(**kwargs: Any) -> Exception:
    from vllm import SamplingParams

    try:
        SamplingParams(**kwargs)
    except Exception as e:
        return e
    raise AssertionError(f"vLLM took {kwargs}")


def _schema_error(**constraint: Any) -> Exception:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    params = SamplingParams(structured_outputs=StructuredOutputsParams(**constraint))
    try:
        validate_xgrammar_grammar(params)
    except Exception as e:
        return e
    raise AssertionError(f"vLLM took {constraint}")


def _validation(message: str, **extra: Any) -> Exception:
    from vllm.exceptions import VLLMValidationError

    error: Exception = VLLMValidationError(message, **extra)
    return error


def _client(error: BaseException, request: EngineRequest | None, param: str) -> NeuraxisError:
    translated = client_error(error, request)
    assert translated is not None, error
    assert translated.param == param
    assert translated.message.startswith(f"Invalid '{param}': ")
    said = error.__cause__ if error.__cause__ is not None else error
    assert str(said.args[0]) not in translated.message
    assert not ENGINE_WORDING.search(translated.message), translated.message
    return translated


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -5}, "top_k"),
        ({"presence_penalty": 5.0}, "presence_penalty"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"n": 2, "temperature": 0.0}, "n"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
        ({"stop": [""]}, "stop"),
        ({"bad_words": [""]}, "bad_words"),
    ],
)
def test_a_sampling_value_vllm_refuses_is_a_400_naming_the_field(
    kwargs: dict[str, Any], param: str
) -> None:
    translated = _client(_sampling_error(**kwargs), CHAT, param)
    assert type(translated) is InvalidRequestError
    assert mapping_for(translated).http_status == 400


@pytest.mark.parametrize(
    "constraint",
    [
        {"json": {"type": "object", "properties": {"a": {"type": "nonsense"}}}},
        {"json": "{not json"},
        {"regex": "(unclosed"},
        {"grammar": "start: ???"},
    ],
)
@pytest.mark.parametrize(
    ("request_", "param"), [(SCHEMA, "response_format"), (FORCED_TOOL, "tools")]
)
def test_a_schema_or_grammar_the_compiler_refuses_names_where_it_came_from(
    constraint: dict[str, Any], request_: EngineRequest, param: str
) -> None:
    # xgrammar's own text names its C++ source file and line.
    _client(_schema_error(**constraint), request_, param)


def test_a_schema_nested_too_deeply_is_the_clients() -> None:
    from vllm.sampling_params import check_json_nesting

    schema: dict[str, Any] = {"type": "object"}
    for _ in range(100):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(Exception) as raised:
        check_json_nesting(schema)
    _client(raised.value, SCHEMA, "response_format")


def test_a_schema_error_without_a_schema_from_the_client_is_not_the_clients() -> None:
    # json_object's constraint is ours; and two constraints at once are our bug.
    assert client_error(_schema_error(json="{not json"), JSON_OBJECT) is None
    ours = _validation("You can only use one kind of structured outputs constraint but ...")
    assert client_error(ours, SCHEMA) is None


@pytest.mark.parametrize(
    ("error", "request_", "param"),
    [
        (
            _validation(
                "Requested sample logprobs of 30, which is greater than max allowed: 20",
                parameter="logprobs",
                value=30,
            ),
            CHAT,
            "top_logprobs",
        ),
        (
            _validation(
                "Requested sample logprobs of 30, which is greater than max allowed: 20",
                parameter="logprobs",
                value=30,
            ),
            COMPLETION,
            "logprobs",
        ),
        (
            _validation(
                "token_id(s) [99999999] in stop_token_ids contain out-of-vocab token ids. "
                "Vocabulary size: 49152",
                parameter="stop_token_ids",
                value=[99999999],
            ),
            CHAT,
            "stop_token_ids",
        ),
        (
            _validation(
                "allowed_token_ids contains out-of-vocab token id!",
                parameter="allowed_token_ids",
            ),
            CHAT,
            "allowed_token_ids",
        ),
        (
            _validation("Too many bad words after tokenization: 300. The max number is 128."),
            CHAT,
            "bad_words",
        ),
        (
            _validation(
                "n must be at most 16, got 32. To increase this limit, set the "
                "VLLM_MAX_N_SEQUENCES environment variable."
            ),
            CHAT,
            "n",
        ),
        (_validation("The decoder prompt cannot be empty"), COMPLETION, "prompt"),
        (
            _validation(
                "Model '/var/lib/neuraxis/models/all-minilm-l6-v2' only supports dimensions "
                "in range [1, 384], got 1000."
            ),
            None,
            "dimensions",
        ),
        (
            _validation(
                "Model '/var/lib/neuraxis/models/all-minilm-l6-v2' does not support Matryoshka "
                "embeddings; dimensions must be unset (received dimensions=8)."
            ),
            None,
            "dimensions",
        ),
    ],
)
def test_what_vllm_checks_against_the_model_is_a_400_in_our_words(
    error: Exception, request_: EngineRequest | None, param: str
) -> None:
    _client(error, request_, param)


def test_a_prompt_past_the_context_keeps_its_code() -> None:
    error = _validation(
        "The decoder prompt (length 2049) is longer than the maximum model length of 2048. "
        "Make sure that `max_model_len` is no smaller than the number of text tokens."
    )
    translated = _client(error, CHAT, "messages")
    assert isinstance(translated, ContextLengthExceededError)
    assert mapping_for(translated).openai_code == "context_length_exceeded"


def test_a_plain_value_error_wrapped_by_asyncllm_is_judged_by_its_cause() -> None:
    from vllm.v1.engine.exceptions import EngineGenerateError

    wrapped = EngineGenerateError()
    wrapped.__cause__ = ValueError("structured_outputs.regex must not contain a NUL character")
    _client(wrapped, FORCED_TOOL, "tools")
    unknown = EngineGenerateError()
    unknown.__cause__ = ValueError("mm_hashes must contain only strings, got: [1]")
    assert client_error(unknown, CHAT) is None


@pytest.mark.parametrize(
    "error",
    [
        _validation("This model does not support generation"),
        _validation(
            "thinking_token_budget is set but reasoning_config is not configured. Please set "
            "--reasoning-parser and/or --reasoning-config to use thinking_token_budget."
        ),
        ValueError(
            "Cannot use chat template functions because tokenizer.chat_template is not set "
            "and no template argument was passed!"
        ),
        ValueError("The external_req_id field should not be set on EngineCoreRequests"),
        RuntimeError("Already borrowed"),
        KeyError("index"),
        ValueError(),
    ],
)
def test_anything_else_is_not_the_clients(error: Exception) -> None:
    assert client_error(error, CHAT) is None


def _render(template: str) -> Exception:
    """Render `template` as Hugging Face's tokenizers do (sandboxed Jinja,
    `raise_exception`), over a conversation of two user turns."""
    from transformers.utils.chat_template_utils import render_jinja_template

    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    try:
        render_jinja_template([messages], chat_template=template)
    except Exception as e:
        return e
    raise AssertionError("the template rendered")


ALTERNATE = (
    "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{{ m['content'] }}{% endfor %}"
)


def test_a_template_that_refuses_the_conversation_is_quoted_naming_the_messages() -> None:
    translated = client_error(_render(ALTERNATE), CHAT)
    assert isinstance(translated, InvalidRequestError) and translated.param == "messages"
    assert translated.message == (
        "Invalid 'messages': the model's chat template refuses this conversation: "
        "Conversation roles must alternate user/assistant/user/assistant/..."
    )


def test_a_template_reading_what_a_message_lacks_is_the_clients_in_our_words() -> None:
    error = _render("{% for m in messages %}{{ m.tool_calls[0].name }}{% endfor %}")
    translated = _client(error, CHAT, "messages")
    assert "chat template cannot render" in translated.message


@pytest.mark.parametrize(
    "template",
    [
        "{% for m in messages %}{{ m['content'] }",  # does not parse: the model's template
        "{{ messages.__class__.__mro__ }}",  # breaks the sandbox
        "{{ messages[0]['content'] + 1 }}",  # a TypeError in the template
    ],
)
def test_a_broken_template_is_not_the_clients(template: str) -> None:
    assert client_error(_render(template), CHAT) is None
