"""The tool unions accept every tool type of the pinned SDK (served ones
field by field, hosted ones by type) and still refuse what is not a tool."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from pydantic import ValidationError

from cortex.schemas.chat import ChatCompletionRequest
from cortex.schemas.responses import ResponsesRequest
from cortex.schemas.tools import (
    CustomTool,
    FunctionTool,
    HostedTool,
    HostedType,
    NamespaceTool,
)
from tests.unit.cortex.schemas import bodies


def _responses(tools: list[Any], **fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", "input": "Hi", "tools": tools, **fields})


def test_a_function_tool_with_the_sdks_newer_fields() -> None:
    (tool,) = (
        _responses(
            [
                {
                    "type": "function",
                    "name": "exec_command",
                    "parameters": {"type": "object"},
                    "strict": False,
                    "defer_loading": False,
                    "async": False,
                    "allowed_callers": ["direct"],
                    "output_schema": {"type": "string"},
                }
            ]
        ).tools
        or []
    )
    assert isinstance(tool, FunctionTool) and tool.name == "exec_command"


def test_a_namespace_of_functions_and_custom_tools() -> None:
    (tool,) = (
        _responses(
            [
                {
                    "type": "namespace",
                    "name": "multi_agent_v1",
                    "description": "Sub-agents.",
                    "tools": [
                        {"type": "function", "name": "close_agent", "parameters": {}},
                        {"type": "custom", "name": "note"},
                    ],
                }
            ]
        ).tools
        or []
    )
    assert isinstance(tool, NamespaceTool)
    assert [type(t) for t in tool.tools] == [FunctionTool, CustomTool]


@pytest.mark.parametrize(
    "fmt",
    [
        None,
        {"type": "text"},
        {"type": "grammar", "syntax": "lark", "definition": "start: WORD"},
        {"type": "grammar", "syntax": "regex", "definition": "[a-z]+"},
    ],
)
def test_a_custom_tool_with_each_input_format(fmt: dict[str, Any] | None) -> None:
    (tool,) = _responses([{"type": "custom", "name": "apply_patch", "format": fmt}]).tools or []
    assert isinstance(tool, CustomTool)


@pytest.mark.parametrize("kind", get_args(HostedType))
def test_every_hosted_tool_type_is_accepted(kind: str) -> None:
    (tool,) = _responses([{"type": kind, "some_setting": 1}]).tools or []
    assert isinstance(tool, HostedTool) and tool.type == kind


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "telepathy"},
        {"type": "function", "name": "f", "paramters": {}},
        {"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf",
                                                   "definition": "x"}},
        {"type": "namespace", "name": "n", "tools": []},
    ],
)  # fmt: skip
def test_what_is_not_a_tool_is_refused(tool: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _responses([tool])


@pytest.mark.parametrize(
    "choice",
    [
        "auto",
        {"type": "function", "name": "f"},
        {"type": "custom", "name": "f"},
        {"type": "web_search_preview"},
        {"type": "mcp", "server_label": "s", "name": "t"},
    ],
)
def test_responses_tool_choices(choice: Any) -> None:
    assert _responses([{"type": "function", "name": "f"}], tool_choice=choice).tool_choice


def test_chat_takes_function_and_custom_tools_and_custom_calls_in_history() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": bodies.custom_call_history("t", "x"),
            "tools": [
                {"type": "function", "function": {"name": "f"}},
                {"type": "custom", "custom": {"name": "t", "format": {"type": "text"}}},
            ],
            "tool_choice": {"type": "custom", "custom": {"name": "t"}},
        }
    )
    assert len(body.tools or []) == 2


@pytest.mark.parametrize(
    "choice",
    [
        "required",
        {"type": "function", "function": {"name": "f"}},
        {"type": "custom", "custom": {"name": "t"}},
    ],
)
def test_chat_tool_choices(choice: Any) -> None:
    body = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "tools": [
                {"type": "function", "function": {"name": "f"}},
                {"type": "custom", "custom": {"name": "t"}},
            ],
            "tool_choice": choice,
        }
    )
    assert body.tool_choice == choice or body.tool_choice.model_dump() == choice  # type: ignore[union-attr]
