"""What a client controls at the HTTP edge cannot stall cortex (issue 31),
through real processes: cortex with `auth = required` in front of a
simulated neuron, raw sockets where the point is what cortex reads.

Covered: a request without a valid key, or from a key already at its
request rate, is refused from its headers before its body is read; a large
body is still served, and a large invalid one gets the 400 that names its
field; concurrent requests of text at two bytes a token (the sim counts
words) stay within their key's tpm.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cortex.auth.limits import WINDOW_S
from harness.gateway import sim_gateway
from harness.keys import new_key
from harness.polling import wait_until

MODEL = "sim-hardening"
BIG = 16 * 1024 * 1024 - 4096  # under max_body_bytes (16 MiB)
# How long a refusal may take. Without it cortex waits for the whole body
# (none comes) until the body deadline, 60 s.
ANSWER_S = 15.0
# The sim's time to first token: concurrent requests are all admitted
# before the first one settles.
TTFT_S = 1.0


@dataclass
class Edge:
    base_url: str
    port: int
    state_dir: Path

    def new_key(self, *options: str) -> str:
        return new_key(self.state_dir, "t", *options)


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    logs = tmp_path_factory.mktemp("hardening-edge-logs")
    state_dir = tmp_path_factory.mktemp("hardening-edge-state")
    flags = ["--auth", "required", "--state-dir", str(state_dir)]
    neuron = ["--sim-ttft-s", str(TTFT_S), "--sim-itl-s", "0"]
    with sim_gateway(logs, "edge", *flags, served_id=MODEL, neuron_flags=neuron) as running:
        yield Edge(running.base_url, running.cortex.port, state_dir)


def _chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": content}]}


def _status_before_the_body(edge: Edge, key: str | None) -> int:
    """Announce a body of BIG bytes, send 1 KiB of it, and read the answer."""
    auth = b"authorization: Bearer %s\r\n" % key.encode() if key else b""
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: cortex\r\n%s"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % (auth, BIG)
    )
    with socket.create_connection(("127.0.0.1", edge.port), timeout=ANSWER_S) as sock:
        sock.sendall(head + b'{"model": "' + b"x" * 1024)
        answer = sock.recv(65536)
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("key", [None, "nx-" + "0" * 43], ids=["missing", "unknown"])
def test_a_request_without_a_valid_key_is_refused_before_its_body(
    edge: Edge, key: str | None
) -> None:
    assert _status_before_the_body(edge, key) == 401


def _in_one_window(margin_s: float = 10.0) -> None:
    """Return where the next `margin_s` lie in one rate-limit window: the
    windows are fixed minutes of the wall clock (cortex/auth/limits.py), and
    a first request at a minute's end left the second a fresh window (CI saw
    it once)."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left < margin_s:
        time.sleep(left + 0.05)  # into the next window, which has the whole minute


def test_a_key_at_its_request_rate_is_refused_before_its_body(edge: Edge) -> None:
    key = edge.new_key("--rpm", "1")
    _in_one_window()
    headers = {"Authorization": f"Bearer {key}"}
    first = httpx.post(f"{edge.base_url}/v1/chat/completions", json=_chat("hi"), headers=headers)
    assert first.status_code == 200
    assert _status_before_the_body(edge, key) == 429


def test_a_large_body_is_parsed_and_served(edge: Edge) -> None:
    key = edge.new_key()
    headers = {"Authorization": f"Bearer {key}"}
    body = _chat("x" * 100_000)  # one word: a few sim tokens
    answer = httpx.post(f"{edge.base_url}/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    body["messages"].append({"role": "robot", "content": "x"})
    refused = httpx.post(f"{edge.base_url}/v1/chat/completions", json=body, headers=headers)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "messages[1].role"
    broken = json.dumps(body).encode()[:-1]
    headers["content-type"] = "application/json"
    refused = httpx.post(f"{edge.base_url}/v1/chat/completions", content=broken, headers=headers)
    assert refused.status_code == 400
    assert "could not parse the JSON body" in refused.json()["error"]["message"]


def test_concurrent_requests_stay_within_the_keys_tpm(edge: Edge) -> None:
    """Each request: 1,000 words of 2 bytes (1,010 tokens with its output),
    reserved at its bytes and the template's share (~2,350). At bytes / 4
    (~530 each) all four were admitted: 4,040 tokens against a tpm of 2,400."""
    tpm = 2400
    key = edge.new_key("--tpm", str(tpm))
    headers = {"Authorization": f"Bearer {key}"}
    body = {**_chat("a " * 1000), "max_tokens": 10}
    # All four in one rate-limit window (a minute, aligned to the epoch's).
    assert wait_until(lambda: time.time() % 60 < 45, 20)

    async def four() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=edge.base_url, headers=headers, timeout=60) as c:
            calls = [c.post("/v1/chat/completions", json=body) for _ in range(4)]
            return await asyncio.gather(*calls)

    answers = asyncio.run(four())
    served = [a for a in answers if a.status_code == 200]
    assert {a.status_code for a in answers} <= {200, 429}, [a.text for a in answers]
    assert served
    used = sum(a.json()["usage"]["total_tokens"] for a in served)
    assert used <= tpm, f"{len(served)} served used {used} tokens against a tpm of {tpm}"
