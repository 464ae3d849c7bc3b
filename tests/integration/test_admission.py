"""Admission control with real processes: cortex (a replica cap of 2, an
admission queue of 2) in front of one simulated neuron, over HTTP and gRPC.

- past the caps and a full queue, a request gets 503 `model_overloaded`
  with Retry-After in milliseconds, while the queued ones proceed as slots
  free;
- a request queued past the queue timeout gets the same 503;
- a client that leaves while queued frees its place at once.

The times are printed (run with -s to see them); the timed assertions are
generous bounds ("not a 600 s wait"), for a loaded machine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from harness.gateway import sim_gateway
from harness.procs import engine_load

MODEL = "sim-admission"
CAP = 2
QUEUE = 2
QUEUE_TIMEOUT_S = 5.0
ITL_S = 0.02
# "Not a 600 s wait ending in 504": generous, for a loaded machine; the
# milliseconds are printed.
AT_ONCE_S = 60.0


@dataclass
class Gateway:
    base_url: str
    admin_url: str
    neuron: str  # gRPC address

    def running(self) -> int:
        return engine_load(self.neuron).running


@pytest.fixture(scope="module")
def gateway(logs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    cortex_args = ["--model", MODEL, "--state-dir", str(tmp_path_factory.mktemp("adm-state"))]
    cortex_args += ["--replica-max-concurrency", str(CAP)]
    cortex_args += ["--admission-queue-size", str(QUEUE)]
    cortex_args += ["--admission-queue-timeout-s", str(QUEUE_TIMEOUT_S)]
    neuron_args = ["--sim-ttft-s", "0.01", "--sim-itl-s", str(ITL_S)]
    with sim_gateway(
        logs_dir, "admission", *cortex_args, served_id=MODEL, neuron_flags=neuron_args
    ) as running:
        yield Gateway(running.base_url, running.admin_url, running.neuron.address)


@dataclass
class Answer:
    status: int
    seconds: float
    body: dict[str, object]
    retry_after: str | None


def _chat(tokens: int) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": tokens,
    }


async def _ask(http: httpx.AsyncClient, base: str, tokens: int) -> Answer:
    started = time.perf_counter()
    response = await http.post(f"{base}/v1/chat/completions", json=_chat(tokens))
    return Answer(
        response.status_code,
        time.perf_counter() - started,
        response.json(),
        response.headers.get("retry-after"),
    )


async def _until(condition: object, timeout_s: float = 10.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.02)


def _queue_depth(admin: str) -> float:
    """The model's admission queue depth, from cortex's /metrics."""
    text = httpx.get(f"{admin}/metrics").text
    prefix = f'neuraxis_admission_queue_depth{{model="{MODEL}"}} '
    return sum(
        float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix)
    )


def _overloaded(answer: Answer) -> bool:
    error = answer.body.get("error")
    return (
        answer.status == 503
        and isinstance(error, dict)
        and error.get("code") == "model_overloaded"
        and error.get("type") == "server_error"
        and answer.retry_after == "1"
    )


async def test_a_full_queue_answers_503_at_once_and_queued_requests_proceed(
    gateway: Gateway,
) -> None:
    tokens = 80  # ~1.6 s each: the queued ones wait one generation, within the timeout
    async with httpx.AsyncClient(timeout=60) as http:
        running = [asyncio.create_task(_ask(http, gateway.base_url, tokens)) for _ in range(CAP)]
        await _until(lambda: gateway.running() == CAP)
        # The queue's size, plus one: whichever arrives last is refused.
        extra = [_ask(http, gateway.base_url, tokens) for _ in range(QUEUE + 1)]
        answers = await asyncio.gather(*running, *extra)
    refused = [a for a in answers if a.status != 200]
    admitted = [a for a in answers if a.status == 200]
    print("\nqueue full: " + ", ".join(f"503 in {a.seconds * 1000:.1f} ms" for a in refused))
    print("admitted: " + ", ".join(f"{a.seconds:.2f} s" for a in admitted))
    assert len(refused) == 1 and _overloaded(refused[0]), refused
    assert "already waiting" in str(refused[0].body)  # the full queue, not a timed-out wait
    assert refused[0].seconds < AT_ONCE_S
    assert len(admitted) == CAP + QUEUE
    # The queued two ran after the first two: each waited about one generation.
    first_two = max(a.seconds for a in answers[:CAP])
    queued = sorted(a.seconds for a in answers[CAP:] if a.status == 200)
    assert min(queued) > first_two * 0.9, (first_two, queued)


async def test_a_request_queued_past_the_timeout_gets_503(gateway: Gateway) -> None:
    tokens = 350  # ~7 s: longer than the queue timeout
    async with httpx.AsyncClient(timeout=60) as http:
        holders = [asyncio.create_task(_ask(http, gateway.base_url, tokens)) for _ in range(CAP)]
        await _until(lambda: gateway.running() == CAP)
        waited = await _ask(http, gateway.base_url, 5)
        await asyncio.gather(*holders)
    print(f"\nqueue timeout ({QUEUE_TIMEOUT_S} s): 503 after {waited.seconds:.2f} s")
    assert _overloaded(waited), waited
    assert "within 5 s" in str(waited.body)
    # It waited for the timeout, and not much longer (a loaded machine may add seconds).
    assert QUEUE_TIMEOUT_S <= waited.seconds < QUEUE_TIMEOUT_S + 10


async def test_a_client_that_leaves_while_queued_frees_its_place(gateway: Gateway) -> None:
    # ~3 s: the holders outlast the queue timeout of the clients that leave,
    # so only their leaving can empty the queue before it.
    tokens = 150
    async with httpx.AsyncClient(timeout=60) as http:
        holders = [asyncio.create_task(_ask(http, gateway.base_url, tokens)) for _ in range(CAP)]
        await _until(lambda: gateway.running() == CAP)
        async with httpx.AsyncClient(timeout=0.5) as impatient:
            leavers = [_ask(impatient, gateway.base_url, 5) for _ in range(QUEUE)]
            left = await asyncio.gather(*leavers, return_exceptions=True)
        assert all(isinstance(e, httpx.TimeoutException) for e in left), left
        # Their places free soon after they leave (the server learns of the
        # closed connections on its next loop turns, not at once; over a
        # second on a loaded machine), and before their queue timeout: they
        # left 0.5 s into it.
        await _until(lambda: _queue_depth(gateway.admin_url) == 0, timeout_s=2.0)
        # Had they stayed queued, the queue would be full and this refused.
        later = await _ask(http, gateway.base_url, 5)
        await asyncio.gather(*holders)
    print(f"\nafter two queued clients left: {later.status} in {later.seconds:.2f} s")
    assert later.status == 200, later
