"""The tools a request offers, as the model sees them, and the way back from
a call the model made to the call item the client expects.

- A `function` tool is offered as it is.
- A `namespace` tool is flattened: each of its tools is offered under
  `<namespace>.<name>` (MODEL_NAME), and a call of that name comes back as a
  call of `<name>` with `namespace` set. Its description leads each tool's.
- A `custom` tool (free-form text input) is offered as a custom pb.Tool,
  which the neuron presents as a function of one string argument, `input`;
  a call comes back as a custom call whose input is that string. Forced by
  name, the model's whole output is the input (constrained by the tool's
  grammar in the neuron), so it is taken as it is.
- Hosted tools (web search, file search, MCP, ...) cannot run here: they are
  left out of what the model sees, logged and counted
  (`neuraxis_dropped_tools_total`), and a tool choice forcing one is a 400
  naming it.

The Responses API and chat completions share this; what each API does with
the calls (items, chunks) stays in its own module. `CallNaming` can be
rebuilt from a stored response's echo of its request (`tools`,
`tool_choice`), so a resumed response names its calls the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from axon.errors import InvalidRequestError
from axon.v1 import neuron_pb2 as pb
from cortex.api import params
from cortex.recording import Recorder
from cortex.schemas.surfaces import RESPONSES
from cortex.schemas.tools import (
    ChatCustomTool,
    ChatFunctionTool,
    ChatGrammarFormat,
    CustomTool,
    ForcedHosted,
    FunctionTool,
    GrammarInputFormat,
    HostedTool,
    NamedCustom,
    NamedFunction,
    NamespaceTool,
    ResponsesTool,
    ResponsesToolChoice,
)

log = logging.getLogger("neuraxis.cortex.tools")

_SYNTAX = {"lark": pb.GRAMMAR_SYNTAX_LARK, "regex": pb.GRAMMAR_SYNTAX_REGEX}
_TOOLS = TypeAdapter(list[ResponsesTool])
_CHOICE: TypeAdapter[ResponsesToolChoice] = TypeAdapter(ResponsesToolChoice)


def model_name(name: str, namespace: str | None) -> str:
    """The name the model knows a tool by."""
    return f"{namespace}.{name}" if namespace else name


@dataclass(frozen=True)
class Offered:
    """A tool the model was offered, as the client named it."""

    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass
class CallNaming:
    """From the model's name of a called tool back to the client's."""

    offered: dict[str, Offered] = field(default_factory=dict)
    # The model name of a custom tool forced by name: its output is its input.
    forced_custom: str | None = None

    def of(self, name: str) -> Offered:
        # A name the request did not offer (a model's invention) stays a function call.
        return self.offered.get(name, Offered(name))

    def custom_input(self, name: str, arguments: str) -> str:
        """A custom call's input from what the neuron sent as its arguments."""
        if name == self.forced_custom:
            return arguments
        try:
            value = json.loads(arguments)
        except ValueError:
            return arguments
        if isinstance(value, dict) and isinstance(value.get("input"), str):
            return str(value["input"])
        return arguments

    @classmethod
    def from_echo(cls, fields: dict[str, Any]) -> CallNaming:
        """The naming of a response from its echo of the request."""
        try:
            tools = _TOOLS.validate_python(fields.get("tools") or [])
            choice = _CHOICE.validate_python(fields.get("tool_choice") or "auto")
            return responses_catalog(tools, choice, recorder=None).naming
        except (ValidationError, InvalidRequestError):
            # Only a record written by another version could hold such tools.
            log.warning("a response's tools do not parse; its calls stay function calls")
            return cls()


@dataclass
class Catalog:
    """What the model is offered for one request."""

    tools: list[pb.Tool] = field(default_factory=list)
    naming: CallNaming = field(default_factory=CallNaming)
    dropped: list[str] = field(default_factory=list)  # hosted tool types left out

    def add(self, tool: pb.Tool, offered: Offered) -> None:
        if tool.name in self.naming.offered:
            raise InvalidRequestError(
                f"Two tools are named '{tool.name}'; tool names must be unique.", param="tools"
            )
        self.tools.append(tool)
        self.naming.offered[tool.name] = offered

    def resolve(self, name: str, custom: bool) -> str:
        """The model name of the tool a tool choice names (a namespaced
        function may be named without its namespace when that is unique).
        A name offered nowhere is left to `params.check` to refuse."""
        found = self.naming.offered.get(name)
        if found is None:
            matches = [m for m, o in self.naming.offered.items() if o.name == name]
            if len(matches) != 1:
                return name
            name, found = matches[0], self.naming.offered[matches[0]]
        if found.custom is not custom:
            kind, other = ("custom tool", "function") if custom else ("function", "custom tool")
            raise InvalidRequestError(
                f"tool_choice names the {kind} '{name}', but '{name}' is a {other}.",
                param="tool_choice",
            )
        return name


def _custom(name: str, description: str | None, grammar: tuple[str, str] | None) -> pb.Tool:
    tool = pb.Tool(name=name, description=description or "", kind=pb.TOOL_KIND_CUSTOM)
    if grammar is not None:
        tool.grammar_syntax = _SYNTAX[grammar[0]]
        tool.grammar = grammar[1]
    return tool


def _responses_custom(tool: CustomTool, namespace: NamespaceTool | None) -> pb.Tool:
    fmt = tool.format
    grammar = (fmt.syntax, fmt.definition) if isinstance(fmt, GrammarInputFormat) else None
    prefix = namespace.name if namespace else None
    return _custom(model_name(tool.name, prefix), _described(tool.description, namespace), grammar)


def _described(description: str | None, namespace: NamespaceTool | None) -> str | None:
    if namespace is None or not namespace.description:
        return description
    return f"{namespace.description}\n{description}" if description else namespace.description


def _function(tool: FunctionTool, namespace: NamespaceTool | None) -> pb.Tool:
    name = model_name(tool.name, namespace.name if namespace else None)
    return params.tool(name, _described(tool.description, namespace), tool.parameters, tool.strict)


def responses_catalog(
    tools: Sequence[FunctionTool | CustomTool | NamespaceTool | HostedTool],
    choice: ResponsesToolChoice | None,
    recorder: Recorder | None,
) -> Catalog:
    """The Responses API's tools, flattened; the hosted ones it drops are
    counted by `recorder` (None: rebuilding a stored response's naming,
    nothing is counted again)."""
    if isinstance(choice, ForcedHosted):
        what = f"{choice.server_label}/{choice.name}" if choice.server_label else choice.type
        raise InvalidRequestError(
            f"tool_choice forces the hosted tool '{what}', which this server cannot run.",
            param="tool_choice",
        )
    catalog = Catalog()
    for tool in tools:
        if isinstance(tool, HostedTool):
            catalog.dropped.append(tool.type)
        elif isinstance(tool, NamespaceTool):
            for inner in tool.tools:
                _add_responses_tool(catalog, inner, tool)
        else:
            _add_responses_tool(catalog, tool, None)
    if isinstance(choice, NamedCustom | NamedFunction):
        resolved = catalog.resolve(choice.name, isinstance(choice, NamedCustom))
        if isinstance(choice, NamedCustom):
            catalog.naming.forced_custom = resolved
    if recorder is not None:
        record_dropped(recorder, RESPONSES.name, catalog.dropped)
    return catalog


def _add_responses_tool(
    catalog: Catalog, tool: FunctionTool | CustomTool, namespace: NamespaceTool | None
) -> None:
    prefix = namespace.name if namespace else None
    offered = Offered(tool.name, prefix, custom=isinstance(tool, CustomTool))
    if isinstance(tool, CustomTool):
        catalog.add(_responses_custom(tool, namespace), offered)
    else:
        catalog.add(_function(tool, namespace), offered)


def chat_catalog(tools: Sequence[ChatFunctionTool | ChatCustomTool]) -> Catalog:
    catalog = Catalog()
    for tool in tools:
        if isinstance(tool, ChatFunctionTool):
            f = tool.function
            pb_tool = params.tool(f.name, f.description, f.parameters, f.strict)
            catalog.add(pb_tool, Offered(f.name))
        else:
            c = tool.custom
            fmt = c.format
            grammar = (
                (fmt.grammar.syntax, fmt.grammar.definition)
                if isinstance(fmt, ChatGrammarFormat)
                else None
            )
            catalog.add(_custom(c.name, c.description, grammar), Offered(c.name, custom=True))
    return catalog


def record_dropped(recorder: Recorder, api: str, dropped: list[str]) -> None:
    """Hosted tools left out of what the model sees: logged and counted."""
    if dropped:
        log.info("hosted tools left out (this server cannot run them): %s", ", ".join(dropped))
    for kind in dropped:
        recorder.dropped_tool(api, kind)


def effective_mode(
    catalog: Catalog, mode: params.ToolMode | None
) -> tuple[params.ToolMode | None, bool]:
    """The tool mode once hosted tools are gone, and whether the request
    still asks for tools. `auto` or `none` over hosted tools only is a
    request without tools; `required` over them cannot be served."""
    if catalog.tools or not catalog.dropped:
        return mode, bool(catalog.tools)
    if mode == "required":
        raise InvalidRequestError(
            "tool_choice 'required' but the only tools are hosted ones this server cannot "
            f"run: {', '.join(catalog.dropped)}.",
            param="tool_choice",
        )
    return None, False
