from __future__ import annotations

from harness.toolcalls import CITY_WEATHER, chat_tool


def test_a_chat_tool_holds_the_responses_tools_fields_under_function() -> None:
    assert chat_tool(CITY_WEATHER) == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city",
            "parameters": CITY_WEATHER["parameters"],
        },
    }
