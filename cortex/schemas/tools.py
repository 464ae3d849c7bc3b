"""Wire types of tools: the tool unions of the Responses API and of chat
completions, and the Responses API's tool choices, as the pinned openai SDK
spells them (openai/types/responses/tool.py, namespace_tool.py,
custom_tool.py; openai/types/chat/chat_completion_tool_union_param.py).

What a self-hosted server can serve is typed field by field: `function`,
`namespace` (a named group of function and custom tools) and `custom` (free
text input, optionally constrained by a lark or regex grammar). Hosted tools
(web search, file search, code interpreter, image generation, computer use,
MCP, the shell and patch tools that need their own call items) are accepted
by type only, with whatever fields they carry: this server cannot run them,
and cortex/api/tools.py leaves them out of what the model sees. What the
catalogue does with these types lives there, not here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from cortex.schemas.common import FunctionFields

# Every hosted tool type of the pinned SDK's Responses tool union (and the
# built-in tool choices), none of which this server can run.
HostedType = Literal[
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer",
    "computer_use",
    "computer_use_preview",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "tool_search",
    "programmatic_tool_calling",
]


def by_type(*tags: tuple[str, type[BaseModel] | str]) -> Discriminator:
    """Pick a union's member by the value's `type`. Members are tagged with
    their class name (or, in a generic union, a name in the same CamelCase),
    not the `type` value: pydantic puts the tag into an error's location,
    and cortex/api/errors.py drops class names from the `param` it reports
    ("tools[0].function.name", not "tools[0].function.function.name")."""
    names = {kind: model if isinstance(model, str) else model.__name__ for kind, model in tags}

    def tag(value: Any) -> str | None:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return names.get(kind) if isinstance(kind, str) else None

    return Discriminator(
        tag,
        custom_error_type="invalid_type",
        custom_error_message=f"'type' must be one of: {', '.join(names)}",
    )


class _FunctionExtras(BaseModel):
    """Fields the SDK's function tools carry that change nothing here: who
    may call them, deferred loading through tool search (not offered, so
    every tool is loaded), an output schema (outputs are not checked)."""

    allowed_callers: list[Literal["direct", "programmatic"]] | None = None
    async_: bool | None = Field(default=None, alias="async")
    defer_loading: bool | None = None
    output_schema: dict[str, Any] | None = None


class FunctionTool(FunctionFields, _FunctionExtras):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["function"]


class TextInputFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class GrammarInputFormat(BaseModel):
    """A Responses custom tool's grammar (flat, as the Responses API spells it)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: str


_Grammar = TypeVar("_Grammar", bound=BaseModel)

# A custom tool's input: free text, or text a grammar constrains (the
# grammar spelled flat in the Responses API, nested in chat's).
CustomFormat = Annotated[
    Annotated[TextInputFormat, Tag("TextInputFormat")] | Annotated[_Grammar, Tag("GrammarFormat")],
    by_type(("text", TextInputFormat), ("grammar", "GrammarFormat")),
]


class CustomTool(_FunctionExtras):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["custom"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    format: CustomFormat[GrammarInputFormat] | None = None


class NamespaceTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["namespace"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: str = ""
    tools: list[
        Annotated[
            Annotated[FunctionTool, Tag("FunctionTool")] | Annotated[CustomTool, Tag("CustomTool")],
            by_type(("function", FunctionTool), ("custom", CustomTool)),
        ]
    ] = Field(min_length=1)


class HostedTool(BaseModel):
    """A hosted tool: its type, and whatever configuration it came with
    (kept for the response's echo of the request)."""

    model_config = ConfigDict(extra="allow")
    type: HostedType


ResponsesTool = Annotated[
    Annotated[FunctionTool, Tag("FunctionTool")]
    | Annotated[CustomTool, Tag("CustomTool")]
    | Annotated[NamespaceTool, Tag("NamespaceTool")]
    | Annotated[HostedTool, Tag("HostedTool")],
    by_type(
        ("function", FunctionTool),
        ("custom", CustomTool),
        ("namespace", NamespaceTool),
        *((kind, HostedTool) for kind in get_args(HostedType)),
    ),
]


class NamedFunction(BaseModel):
    type: Literal["function"]
    name: str


class NamedCustom(BaseModel):
    type: Literal["custom"]
    name: str


class ForcedHosted(BaseModel):
    """A tool choice forcing a hosted tool (a built-in type, an MCP
    server's tool): always refused, naming the tool."""

    model_config = ConfigDict(extra="allow")
    type: HostedType
    server_label: str | None = None
    name: str | None = None


ResponsesToolChoice = (
    Literal["none", "auto", "required"]
    | Annotated[
        Annotated[NamedFunction, Tag("NamedFunction")] | Annotated[NamedCustom, Tag("NamedCustom")],
        by_type(("function", NamedFunction), ("custom", NamedCustom)),
    ]
    | ForcedHosted
)


# Chat completions: {"type": "function", "function": {...}} and
# {"type": "custom", "custom": {...}} (the grammar nested, as chat spells it).


class FunctionDef(FunctionFields):
    pass


class ChatFunctionTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionDef


class ChatGrammar(BaseModel):
    model_config = ConfigDict(extra="forbid")
    syntax: Literal["lark", "regex"]
    definition: str


class ChatGrammarFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["grammar"]
    grammar: ChatGrammar


class ChatCustomDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    format: CustomFormat[ChatGrammarFormat] | None = None


class ChatCustomTool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["custom"]
    custom: ChatCustomDef


ChatTool = Annotated[
    Annotated[ChatFunctionTool, Tag("ChatFunctionTool")]
    | Annotated[ChatCustomTool, Tag("ChatCustomTool")],
    by_type(("function", ChatFunctionTool), ("custom", ChatCustomTool)),
]


class ChatNamedFunction(BaseModel):
    name: str


class ChatNamedToolChoice(BaseModel):
    type: Literal["function"]
    function: ChatNamedFunction


class ChatNamedCustomChoice(BaseModel):
    type: Literal["custom"]
    custom: ChatNamedFunction
