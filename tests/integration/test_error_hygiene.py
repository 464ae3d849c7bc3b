"""What clients are told when things break inside, with real processes
(cortex in front of simulated neurons): never an internal address, a port,
a file path or an exception's text; an unexpected error names the request
id under which cortex's log has the details.

- a neuron SIGKILLed while it streams: the stream ends with its error event,
  and the requests after it get a 503, none naming the neuron;
- a neuron whose engine fails before the first token: a 500 with a generic
  message and the request id, which cortex's log holds with the details.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from harness.gateway import sim_gateway
from harness.procs import Proc
from harness.stacks import SimStack

MODEL = "sim-hygiene"
HELLO = [{"role": "user", "content": "hello"}]
# Anything that looks like where something runs: an address with a port, a
# loopback name, an absolute path, a Python exception's name.
INTERNAL = re.compile(
    r"\d+\.\d+\.\d+\.\d+|:\d{2,5}\b|localhost|/tmp/|/root/|/usr/|Error\(|Traceback"
)


@dataclass
class Gateway:
    base_url: str
    neuron: Proc
    neuron_port: int
    cortex_log: Path


@pytest.fixture(scope="module")
def gateway(logs_dir: Path) -> Iterator[Gateway]:
    neuron_args = ["--sim-ttft-s", "0.01", "--sim-itl-s", "0.05"]
    with sim_gateway(
        logs_dir, "hygiene", "--model", MODEL, served_id=MODEL, neuron_flags=neuron_args
    ) as running:
        neuron = running.neuron
        yield Gateway(running.base_url, neuron.proc, neuron.port, running.cortex.proc.log_path)


def _clean(text: str) -> None:
    assert not INTERNAL.search(text), text


def test_a_killed_neuron_is_never_named_to_clients(gateway: Gateway) -> None:
    body = {"model": MODEL, "messages": HELLO, "stream": True, "max_tokens": 400}
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        # Streaming has begun (the role chunk rides with the first token).
        assert "chat.completion.chunk" in next(line for line in lines if line.startswith("data: "))
        gateway.neuron.stop(signal.SIGKILL)
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    error = json.loads(rest[-2].removeprefix("data: "))["error"]
    assert error["type"] == "server_error"
    _clean(error["message"])

    # Whatever cortex knows of the dead neuron by now (unreachable, or no
    # longer ready), the answers do not name it.
    answers = []
    for _ in range(5):
        answer = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            json={"model": MODEL, "messages": HELLO},
            timeout=30,
        )
        answers.append(answer)
        time.sleep(0.2)
    assert all(a.status_code == 503 for a in answers), [a.text for a in answers]
    for answer in answers:
        _clean(answer.text)
        assert str(gateway.neuron_port) not in answer.text


def test_an_unexpected_error_answers_the_request_id_and_logs_the_details(
    sim_stack: SimStack, logs_dir: Path
) -> None:
    r = httpx.post(
        f"{sim_stack.base_url}/v1/chat/completions",
        json={"model": sim_stack.crashing_model, "messages": HELLO},
    )
    assert r.status_code == 500
    error = r.json()["error"]
    request_id = r.headers["x-request-id"]
    assert error["type"] == "server_error" and request_id in error["message"]
    _clean(r.text)
    # cortex's log has the request under that id.
    deadline = time.monotonic() + 10
    while request_id not in (logs_dir / "sim-cortex.log").read_text():
        assert time.monotonic() < deadline, "the request id is not in cortex's log"
        time.sleep(0.1)
