from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_KIND_UNSPECIFIED: _ClassVar[ToolKind]
    TOOL_KIND_FUNCTION: _ClassVar[ToolKind]
    TOOL_KIND_CUSTOM: _ClassVar[ToolKind]

class GrammarSyntax(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GRAMMAR_SYNTAX_UNSPECIFIED: _ClassVar[GrammarSyntax]
    GRAMMAR_SYNTAX_LARK: _ClassVar[GrammarSyntax]
    GRAMMAR_SYNTAX_REGEX: _ClassVar[GrammarSyntax]

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NAMED: _ClassVar[ToolChoiceMode]

class ResponseFormatKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESPONSE_FORMAT_KIND_UNSPECIFIED: _ClassVar[ResponseFormatKind]
    RESPONSE_FORMAT_KIND_TEXT: _ClassVar[ResponseFormatKind]
    RESPONSE_FORMAT_KIND_JSON_OBJECT: _ClassVar[ResponseFormatKind]
    RESPONSE_FORMAT_KIND_JSON_SCHEMA: _ClassVar[ResponseFormatKind]

class PriorityClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_CLASS_UNSPECIFIED: _ClassVar[PriorityClass]
    PRIORITY_CLASS_INTERACTIVE: _ClassVar[PriorityClass]
    PRIORITY_CLASS_DEFAULT: _ClassVar[PriorityClass]
    PRIORITY_CLASS_BATCH: _ClassVar[PriorityClass]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]

class GpuGeneration(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GPU_GENERATION_UNSPECIFIED: _ClassVar[GpuGeneration]
    GPU_GENERATION_CPU: _ClassVar[GpuGeneration]
    GPU_GENERATION_AMPERE: _ClassVar[GpuGeneration]
    GPU_GENERATION_ADA: _ClassVar[GpuGeneration]
    GPU_GENERATION_HOPPER: _ClassVar[GpuGeneration]
    GPU_GENERATION_BLACKWELL: _ClassVar[GpuGeneration]

class ModelTask(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_TASK_UNSPECIFIED: _ClassVar[ModelTask]
    MODEL_TASK_GENERATE: _ClassVar[ModelTask]
    MODEL_TASK_EMBED: _ClassVar[ModelTask]
TOOL_KIND_UNSPECIFIED: ToolKind
TOOL_KIND_FUNCTION: ToolKind
TOOL_KIND_CUSTOM: ToolKind
GRAMMAR_SYNTAX_UNSPECIFIED: GrammarSyntax
GRAMMAR_SYNTAX_LARK: GrammarSyntax
GRAMMAR_SYNTAX_REGEX: GrammarSyntax
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_NAMED: ToolChoiceMode
RESPONSE_FORMAT_KIND_UNSPECIFIED: ResponseFormatKind
RESPONSE_FORMAT_KIND_TEXT: ResponseFormatKind
RESPONSE_FORMAT_KIND_JSON_OBJECT: ResponseFormatKind
RESPONSE_FORMAT_KIND_JSON_SCHEMA: ResponseFormatKind
PRIORITY_CLASS_UNSPECIFIED: PriorityClass
PRIORITY_CLASS_INTERACTIVE: PriorityClass
PRIORITY_CLASS_DEFAULT: PriorityClass
PRIORITY_CLASS_BATCH: PriorityClass
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_ABORT: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
GPU_GENERATION_UNSPECIFIED: GpuGeneration
GPU_GENERATION_CPU: GpuGeneration
GPU_GENERATION_AMPERE: GpuGeneration
GPU_GENERATION_ADA: GpuGeneration
GPU_GENERATION_HOPPER: GpuGeneration
GPU_GENERATION_BLACKWELL: GpuGeneration
MODEL_TASK_UNSPECIFIED: ModelTask
MODEL_TASK_GENERATE: ModelTask
MODEL_TASK_EMBED: ModelTask

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name", "tool_calls", "tool_call_id")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters_json", "strict", "kind", "grammar", "grammar_syntax")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_FIELD_NUMBER: _ClassVar[int]
    GRAMMAR_SYNTAX_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    strict: bool
    kind: ToolKind
    grammar: str
    grammar_syntax: GrammarSyntax
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ..., strict: _Optional[bool] = ..., kind: _Optional[_Union[ToolKind, str]] = ..., grammar: _Optional[str] = ..., grammar_syntax: _Optional[_Union[GrammarSyntax, str]] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., name: _Optional[str] = ...) -> None: ...

class ResponseFormat(_message.Message):
    __slots__ = ("kind", "schema_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: ResponseFormatKind
    schema_json: str
    def __init__(self, kind: _Optional[_Union[ResponseFormatKind, str]] = ..., schema_json: _Optional[str] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "presence_penalty", "frequency_penalty", "n", "logprobs", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids", "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens", "allowed_token_ids", "bad_words")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACES_BETWEEN_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    BAD_WORDS_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    presence_penalty: float
    frequency_penalty: float
    n: int
    logprobs: int
    min_p: float
    repetition_penalty: float
    min_tokens: int
    ignore_eos: bool
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    include_stop_str_in_output: bool
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    allowed_token_ids: _containers.RepeatedScalarFieldContainer[int]
    bad_words: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., n: _Optional[int] = ..., logprobs: _Optional[int] = ..., min_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., min_tokens: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., include_stop_str_in_output: _Optional[bool] = ..., skip_special_tokens: _Optional[bool] = ..., spaces_between_special_tokens: _Optional[bool] = ..., allowed_token_ids: _Optional[_Iterable[int]] = ..., bad_words: _Optional[_Iterable[str]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "model", "messages", "sampling", "tools", "tool_choice", "response_format", "prompt", "parallel_tool_calls", "truncate_oldest", "priority")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_OLDEST_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    sampling: SamplingParams
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tool_choice: ToolChoice
    response_format: ResponseFormat
    prompt: str
    parallel_tool_calls: bool
    truncate_oldest: bool
    priority: PriorityClass
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., response_format: _Optional[_Union[ResponseFormat, _Mapping]] = ..., prompt: _Optional[str] = ..., parallel_tool_calls: _Optional[bool] = ..., truncate_oldest: _Optional[bool] = ..., priority: _Optional[_Union[PriorityClass, str]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "cached_prompt_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token", "logprob", "bytes")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    token: str
    logprob: float
    bytes: bytes
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ..., bytes: _Optional[bytes] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token", "logprob", "bytes", "top")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    token: str
    logprob: float
    bytes: bytes
    top: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ..., bytes: _Optional[bytes] = ..., top: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "name", "arguments")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ChoiceDelta(_message.Message):
    __slots__ = ("index", "text", "reasoning", "tool_calls", "logprobs", "finish_reason")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    reasoning: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallDelta]
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    finish_reason: FinishReason
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., reasoning: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallDelta, _Mapping]]] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("choices", "usage")
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    choices: _containers.RepeatedCompositeFieldContainer[ChoiceDelta]
    usage: Usage
    def __init__(self, choices: _Optional[_Iterable[_Union[ChoiceDelta, _Mapping]]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class SessionStart(_message.Message):
    __slots__ = ("id", "request", "timeout_s", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: int
    request: GenerateRequest
    timeout_s: float
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[int] = ..., request: _Optional[_Union[GenerateRequest, _Mapping]] = ..., timeout_s: _Optional[float] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class SessionCancel(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class SessionUp(_message.Message):
    __slots__ = ("start", "cancel")
    START_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    start: SessionStart
    cancel: SessionCancel
    def __init__(self, start: _Optional[_Union[SessionStart, _Mapping]] = ..., cancel: _Optional[_Union[SessionCancel, _Mapping]] = ...) -> None: ...

class SessionError(_message.Message):
    __slots__ = ("code", "message", "kind", "param")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    kind: str
    param: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., kind: _Optional[str] = ..., param: _Optional[str] = ...) -> None: ...

class SessionEnd(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionItem(_message.Message):
    __slots__ = ("id", "response", "error", "end")
    ID_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    id: int
    response: GenerateResponse
    error: SessionError
    end: SessionEnd
    def __init__(self, id: _Optional[int] = ..., response: _Optional[_Union[GenerateResponse, _Mapping]] = ..., error: _Optional[_Union[SessionError, _Mapping]] = ..., end: _Optional[_Union[SessionEnd, _Mapping]] = ...) -> None: ...

class SessionDown(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[SessionItem]
    def __init__(self, items: _Optional[_Iterable[_Union[SessionItem, _Mapping]]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class EmbedInput(_message.Message):
    __slots__ = ("text", "tokens")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    text: str
    tokens: TokenIds
    def __init__(self, text: _Optional[str] = ..., tokens: _Optional[_Union[TokenIds, _Mapping]] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("request_id", "model", "inputs", "dimensions")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    inputs: _containers.RepeatedCompositeFieldContainer[EmbedInput]
    dimensions: int
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[EmbedInput, _Mapping]]] = ..., dimensions: _Optional[int] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("embeddings", "prompt_tokens")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    prompt_tokens: int
    def __init__(self, embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ("request_id", "model", "prompt", "messages", "tools", "add_special_tokens", "add_generation_prompt", "continue_final_message", "return_token_strs")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_STRS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    prompt: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    add_special_tokens: bool
    add_generation_prompt: bool
    continue_final_message: bool
    return_token_strs: bool
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., prompt: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., add_special_tokens: _Optional[bool] = ..., add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., return_token_strs: _Optional[bool] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ("tokens", "max_model_len", "token_strs")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_STRS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    max_model_len: int
    token_strs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., max_model_len: _Optional[int] = ..., token_strs: _Optional[_Iterable[str]] = ...) -> None: ...

class DetokenizeRequest(_message.Message):
    __slots__ = ("request_id", "model", "tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class DetokenizeResponse(_message.Message):
    __slots__ = ("prompt",)
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    def __init__(self, prompt: _Optional[str] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("id", "max_context_length", "task", "created", "auto_tool_choice", "supports_dimensions", "default_max_tokens", "parent")
    ID_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    AUTO_TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    max_context_length: int
    task: ModelTask
    created: int
    auto_tool_choice: bool
    supports_dimensions: bool
    default_max_tokens: int
    parent: str
    def __init__(self, id: _Optional[str] = ..., max_context_length: _Optional[int] = ..., task: _Optional[_Union[ModelTask, str]] = ..., created: _Optional[int] = ..., auto_tool_choice: _Optional[bool] = ..., supports_dimensions: _Optional[bool] = ..., default_max_tokens: _Optional[int] = ..., parent: _Optional[str] = ...) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("models", "engine", "generation", "ready", "metrics_port", "max_concurrency", "adapters", "max_adapters")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    METRICS_PORT_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    MAX_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    engine: str
    generation: GpuGeneration
    ready: bool
    metrics_port: int
    max_concurrency: int
    adapters: _containers.RepeatedScalarFieldContainer[str]
    max_adapters: int
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., engine: _Optional[str] = ..., generation: _Optional[_Union[GpuGeneration, str]] = ..., ready: _Optional[bool] = ..., metrics_port: _Optional[int] = ..., max_concurrency: _Optional[int] = ..., adapters: _Optional[_Iterable[str]] = ..., max_adapters: _Optional[int] = ...) -> None: ...

class LoadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LoadResponse(_message.Message):
    __slots__ = ("running", "waiting", "kv_cache_usage", "adapters")
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    running: int
    waiting: int
    kv_cache_usage: float
    adapters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, running: _Optional[int] = ..., waiting: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., adapters: _Optional[_Iterable[str]] = ...) -> None: ...

class LoadAdapterRequest(_message.Message):
    __slots__ = ("id", "source")
    ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    source: str
    def __init__(self, id: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class LoadAdapterResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnloadAdapterRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class UnloadAdapterResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
