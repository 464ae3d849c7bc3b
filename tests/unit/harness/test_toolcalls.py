from __future__ import annotations

from harness.toolcalls import CITY_WEATHER, chat_tool


def test_a_chat_tool_holds_the_responses_tools_fields_under_function() -> None:
    tool = chat_tool(CITY_WEATHER)
    assert list(tool) == ["type", "function"] and tool["type"] == "function"
    fields = ("name", "description", "parameters")
    assert tool["function"] == {field: CITY_WEATHER[field] for field in fields}
