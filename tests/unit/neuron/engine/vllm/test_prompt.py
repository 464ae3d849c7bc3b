"""Prompt rendering and `truncate_oldest`, with a counting fake tokenizer:
which turns are dropped, and that the work is linear in the number of
messages (tokenizer calls counted, not time)."""

from __future__ import annotations

from typing import Any

import pytest

from neuron.engine.base import EngineRequest, Message, Sampling
from neuron.engine.vllm.prompt import render_fitting


class CountingTokenizer:
    """A chat template of "<role> content" lines plus a generation prompt; one
    token per whitespace-separated word. Counts the calls made to it."""

    def __init__(self) -> None:
        self.renders = 0
        self.encodes = 0
        self.vocab: dict[str, int] = {}

    def apply_chat_template(self, messages: list[dict[str, Any]], **_: Any) -> str:
        self.renders += 1
        lines = [f"<{m['role']}> {m['content']}" for m in messages]
        return "\n".join([*lines, "<assistant>"])

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.encodes += 1
        return [self.vocab.setdefault(word, len(self.vocab)) for word in text.split()]

    def words(self, ids: list[int]) -> list[str]:
        names = {i: word for word, i in self.vocab.items()}
        return [names[i] for i in ids]


def _conversation(turns: int, words: int = 9) -> tuple[Message, ...]:
    body = " ".join(["word"] * words)
    chat = [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"turn{i} {body}")
        for i in range(turns)
    ]
    return (Message(role="system", content="be brief"), *chat)


def _request(messages: tuple[Message, ...], truncate: bool = True) -> EngineRequest:
    return EngineRequest(
        request_id="r",
        model="m",
        messages=messages,
        sampling=Sampling(max_tokens=10),
        truncate_oldest=truncate,
    )


@pytest.mark.parametrize("turns", [200, 2000])
def test_truncation_renders_a_constant_number_of_times(turns: int) -> None:
    tokenizer = CountingTokenizer()
    # Every turn is 11 tokens; 500 tokens of room keeps ~44 of them.
    render_fitting(tokenizer, _request(_conversation(turns)), limit=510)
    assert tokenizer.renders <= 3
    # One tokenisation per message for the estimate, and one per render.
    assert tokenizer.encodes <= (turns + 1) + tokenizer.renders


def test_truncation_keeps_the_system_message_and_the_newest_turns_that_fit() -> None:
    tokenizer = CountingTokenizer()
    ids = render_fitting(tokenizer, _request(_conversation(2000)), limit=510)
    words = tokenizer.words(ids)
    assert len(ids) <= 500
    assert words[:3] == ["<system>", "be", "brief"]
    kept = [int(w.removeprefix("turn")) for w in words if w.startswith("turn")]
    assert kept == list(range(2000 - len(kept), 2000))
    # 500 tokens of room, 4 for the system line and the generation prompt, 11
    # per turn: 45 fit. The estimate may cost one turn more than needed.
    assert len(kept) in (44, 45)


def test_a_conversation_that_fits_is_rendered_once() -> None:
    tokenizer = CountingTokenizer()
    ids = render_fitting(tokenizer, _request(_conversation(3)), limit=510)
    assert (tokenizer.renders, tokenizer.encodes) == (1, 1)
    assert len(ids) == 3 + 3 * 11 + 1


def test_without_truncate_oldest_nothing_is_dropped() -> None:
    tokenizer = CountingTokenizer()
    ids = render_fitting(tokenizer, _request(_conversation(100), truncate=False), limit=510)
    assert len(ids) == 3 + 100 * 11 + 1


def test_the_last_turn_is_kept_even_when_it_alone_does_not_fit() -> None:
    tokenizer = CountingTokenizer()
    messages = _conversation(3, words=1000)
    ids = render_fitting(tokenizer, _request(messages), limit=510)
    assert len(ids) == 3 + 1002 + 1
