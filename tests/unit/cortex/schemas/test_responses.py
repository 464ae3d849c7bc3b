"""The Responses request schema: the fields real clients (the openai SDK,
Codex, Open Responses clients) send are accepted, not refused."""

from __future__ import annotations

from cortex.schemas.chat import ChatCompletionRequest
from cortex.schemas.responses import ResponsesRequest


def test_the_fields_clients_send_are_accepted() -> None:
    body = ResponsesRequest.model_validate(
        {
            "model": "m",
            "input": "x",
            "max_tool_calls": 2,
            "prompt_cache_key": "session-1",
            "prompt_cache_retention": "in_memory",
            "safety_identifier": "user-hash",
            "service_tier": "auto",
            "user": "u",
            "top_logprobs": 3,
            "include": ["message.output_text.logprobs"],
            "frequency_penalty": 0.5,
            "presence_penalty": -0.5,
            "client_metadata": {"x-codex-turn": "1"},
        }
    )
    assert body.unsupported == []
    assert body.max_tool_calls == 2 and body.prompt_cache_key == "session-1"
    assert body.client_metadata == {"x-codex-turn": "1"}


def test_chat_accepts_a_prompt_cache_key() -> None:
    body = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "a"}], "prompt_cache_key": "k"}
    )
    assert body.unsupported == [] and body.prompt_cache_key == "k"
