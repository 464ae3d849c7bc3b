"""A request without max_tokens (issue 31 point 3), through real processes:
cortex in front of a simulated neuron whose `default_max_tokens` is 8 and
whose context is 64 tokens. The neuron generates at most the default, or
what the prompt leaves of the context, never an error because of it; and
cortex's `max_output_entries` counts the same default (reported in Info),
not the whole context.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.gateway import sim_gateway

MODEL = "sim-default-max-tokens"
DEFAULT = 8
CONTEXT = 64


@pytest.fixture(scope="module")
def base_url(logs_dir: Path) -> Iterator[str]:
    neuron = ["--default-max-tokens", str(DEFAULT), "--max-model-len", str(CONTEXT)]
    neuron += ["--sim-ttft-s", "0", "--sim-itl-s", "0"]
    # 4 choices x the context (256) is over it, 4 x the default (32) under.
    caps = ("--caps-max-output-entries", "100")
    with sim_gateway(
        logs_dir, "default-max-tokens", *caps, served_id=MODEL, neuron_flags=neuron
    ) as g:
        yield g.base_url


def _chat(base_url: str, words: int, **extra: Any) -> httpx.Response:
    message = {"role": "user", "content": " ".join(["w"] * words)}
    body = {"model": MODEL, "messages": [message], **extra}
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=30)


def test_a_request_without_max_tokens_gets_the_neurons_default(base_url: str) -> None:
    r = _chat(base_url, words=1, n=4)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["usage"]["completion_tokens"] == 4 * DEFAULT
    assert [c["finish_reason"] for c in answer["choices"]] == ["length"] * 4


def test_the_default_shrinks_to_what_the_prompt_leaves_of_the_context(base_url: str) -> None:
    r = _chat(base_url, words=CONTEXT - 3)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3


def test_max_output_entries_still_counts_a_given_max_tokens(base_url: str) -> None:
    r = _chat(base_url, words=1, n=4, max_tokens=CONTEXT // 2)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "max_tokens"
