"""Fair sharing through real processes: one cortex (auth required, a replica
cap of 2, an admission queue of 8, tenants' weights and classes from the
static `admission.tenants` table) in front of one sim neuron, shared by the
tests of this file.

- two backlogged tenants of weights 1 and 3 get output tokens 1:3 (±10 %);
- a quiet tenant's request waits for about one request per backlogged
  tenant while another floods (counted in requests, not seconds);
- a tenant past its share of the queue is refused, and nobody else;
- interactive overtakes batch; a full queue refuses a queued lower class
  for a higher one, never a started stream;
- a tenant's `max_priority` caps its class;
- the usage ledger counts the seconds a request waited in the queue, none
  for one that found a free slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from harness.gateway import sim_gateway
from harness.keys import new_key
from harness.polling import wait_until
from harness.procs import cortex_metric

MODEL = "sim-fair"
CAP = 2
QUEUE = 8
# Requests that keep the queue full while the test looks at it (1 s each).
LONG = 100
# Streams that hold every slot until a request has been seen waiting (10 s
# each): LONG's ended before the next request came on a loaded machine, which
# then never waited.
HELD = 1000
TENANTS = {
    "light": {"weight": 1},
    "heavy": {"weight": 3},
    "filler": {"weight": 2},  # may fill the whole queue (0.5 x 2)
    "vip": {"max_priority": "interactive"},
}
# Tenants without a row: weight 1, class default at most.
OTHERS = ("noisy", "quiet", "capped", "bulk", "waiter")


@dataclass
class Stack:
    base_url: str
    admin_url: str
    keys: dict[str, str]

    def queued(self) -> float:
        return cortex_metric(self.admin_url, "neuraxis_admission_queue_depth", model=MODEL)

    async def until_queued(self, depth: int) -> None:
        """Until `depth` requests wait (polled; fails after a minute)."""
        deadline = time.monotonic() + 60
        while self.queued() < depth:
            assert time.monotonic() < deadline, f"never {depth} waiting"
            await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def stack(logs_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_dir = tmp_path_factory.mktemp("fair-state")
    keys = {t: new_key(state_dir, t) for t in [*TENANTS, *OTHERS]}
    args = ["--model", MODEL, "--auth", "required", "--state-dir", str(state_dir)]
    args += ["--replica-max-concurrency", str(CAP), "--admission-queue-size", str(QUEUE)]
    args += ["--admission-queue-timeout-s", "120", "--admission-tenant-queue-share", "0.5"]
    args += ["--admission-tenants", json.dumps(TENANTS)]
    # No slot kept from batch for the classes above: the queue's order and
    # its refusals are what these tests watch, and with the reserve (one of
    # CAP's two slots) an interactive request would not queue at all
    # (tests/unit/cortex/routing/test_admission_classes.py has the reserve).
    args += ["--admission-batch-reserved-slots", "0"]
    neuron = ["--sim-ttft-s", "0.01", "--sim-itl-s", "0.01"]
    with sim_gateway(logs_dir, "fairness", *args, served_id=MODEL, neuron_flags=neuron) as gw:
        yield Stack(gw.base_url, gw.admin_url, keys)


@dataclass
class Answer:
    tenant: str
    status: int
    sent: int  # order numbers on one counter: what finished before what
    done: int
    tokens: int = 0
    error: str = ""
    finish: str | None = None


@dataclass
class Log:
    """Every answer of a test, numbered in the order events happened."""

    answers: list[Answer] = field(default_factory=list)
    _ticks: int = 0

    def tick(self) -> int:
        self._ticks += 1
        return self._ticks


async def _ask(
    http: httpx.AsyncClient,
    stack: Stack,
    log: Log,
    tenant: str,
    tokens: int = 5,
    **extra: object,
) -> Answer:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens}
    sent = log.tick()
    response = await http.post(
        f"{stack.base_url}/v1/chat/completions",
        json={**body, **extra},
        headers={"Authorization": f"Bearer {stack.keys[tenant]}"},
    )
    answer = Answer(tenant, response.status_code, sent, log.tick())
    data = response.json()
    if response.status_code == 200:
        answer.tokens = data["usage"]["completion_tokens"]
        answer.finish = data["choices"][0]["finish_reason"]
    else:
        answer.error = data["error"]["message"]
        assert data["error"]["code"] == "model_overloaded", data
        assert response.headers.get("retry-after") == "1"
    log.answers.append(answer)
    return answer


async def _backlogged(stack: Stack, loops: dict[str, int], seconds: float) -> dict[str, int]:
    """Each tenant keeps its number of `loops` requests going for `seconds`:
    the output tokens each got from the requests that ended while all were
    backlogged, from the moment every tenant has had an answer (before it,
    the first tenant's loops ran alone and filled the slots and the queue:
    tokens nobody else asked for, not a share) to the end."""
    log = Log()
    ends = time.monotonic() + seconds
    got = dict.fromkeys(loops, 0)
    answered: set[str] = set()

    async def loop(http: httpx.AsyncClient, tenant: str) -> None:
        while time.monotonic() < ends:
            answer = await _ask(http, stack, log, tenant)
            if answer.status != 200:
                # Its share of the queue is full: it is backlogged, as meant.
                # Asked again after a breath, not in a busy loop.
                await asyncio.sleep(0.005)
                continue
            if len(answered) == len(loops) and time.monotonic() < ends:
                got[tenant] += answer.tokens
            answered.add(tenant)

    async with httpx.AsyncClient(timeout=120) as http:
        await asyncio.gather(*(loop(http, t) for t, n in loops.items() for _ in range(n)))
    return got


# Shares and waits counted in a client beside a busy machine: a make test
# run with another load beside it saw 1:2.68 and a quiet request overtaken
# by four. Run alone (the other lane waits).
@pytest.mark.quiet
async def test_backlogged_tenants_of_weights_1_and_3_get_tokens_1_to_3(stack: Stack) -> None:
    # More requests each than run and wait at once, so that one always waits
    # while others travel back to the client, however slow the client is on
    # a loaded machine (a tenant with nothing waiting for a moment lost its
    # turns: 6 heavy loops gave 1:2.4-2.75); the excess is refused
    # (model_overloaded: its queue share is full) and asked again.
    got = await _backlogged(stack, {"light": 5, "heavy": 12}, seconds=6.0)
    ratio = got["heavy"] / got["light"]
    print(f"\noutput tokens light:heavy = {got['light']}:{got['heavy']} (1:{ratio:.2f})")
    # Issue 26's target, 1:3 within 10 %. Counted from the start, light's
    # moment alone (its loops start first and take both slots and its
    # share of the queue before heavy's first request) gave 1:2.68-2.76;
    # counted while both are backlogged, 1:2.80-2.98 in ten runs (the
    # rest: light's first requests were charged 9 tokens, used 6, and
    # their refunds came after heavy had joined).
    assert 3 * 0.9 <= ratio <= 3 * 1.1, got


async def _flood(http: httpx.AsyncClient, stack: Stack, log: Log, count: int) -> list[Answer]:
    """`noisy` sends `count` requests at once."""
    return await asyncio.gather(*(_ask(http, stack, log, "noisy", 20) for _ in range(count)))


async def _flooding(http: httpx.AsyncClient, stack: Stack, log: Log, stop: asyncio.Event) -> None:
    """`noisy` keeps its share of the queue full until `stop`."""

    async def loop() -> None:
        while not stop.is_set():
            await _ask(http, stack, log, "noisy", 20)

    await asyncio.gather(*(loop() for _ in range(CAP + QUEUE // 2)))


@pytest.mark.quiet
async def test_a_quiet_tenant_waits_for_about_one_request_while_another_floods(
    stack: Stack,
) -> None:
    log = Log()
    async with httpx.AsyncClient(timeout=120) as http:
        stop = asyncio.Event()
        flood = asyncio.create_task(_flooding(http, stack, log, stop))
        quiet = []
        for _ in range(3):
            await stack.until_queued(2)  # the flood is waiting
            quiet.append(await _ask(http, stack, log, "quiet", 2))
        stop.set()
        await flood
    for answer in quiet:
        assert answer.status == 200, answer
        overtaken = [
            a
            for a in log.answers
            if a.tenant == "noisy" and a.status == 200 and answer.sent < a.done < answer.done
        ]
        # Waiting for a slot: the requests running plus about one more (FIFO
        # would have it wait for every flood request queued before it).
        assert len(overtaken) <= CAP + 1, (answer, overtaken)


async def test_a_tenant_past_its_queue_share_is_refused_and_nobody_else(stack: Stack) -> None:
    log = Log()
    async with httpx.AsyncClient(timeout=120) as http:
        flood = asyncio.create_task(_flood(http, stack, log, CAP + QUEUE))
        while sum(1 for a in log.answers if a.status != 200) < QUEUE // 2:
            await asyncio.sleep(0.01)  # its share (half the queue) is full
        others = await asyncio.gather(
            *(_ask(http, stack, log, t, 2) for t in ("quiet", "light", "heavy", "quiet"))
        )
        noisy = await flood
    refused = [a for a in noisy if a.status != 200]
    assert len(refused) == QUEUE // 2, noisy
    assert all("this tenant already has 4 requests waiting" in a.error for a in refused)
    assert [a.status for a in others] == [200] * len(others)


async def test_interactive_overtakes_batch_and_takes_a_full_queues_place(stack: Stack) -> None:
    log = Log()
    async with httpx.AsyncClient(timeout=120) as http:
        # filler may fill the whole queue: CAP streams start, QUEUE wait.
        batch = [
            asyncio.create_task(_ask(http, stack, log, "filler", LONG, priority="batch"))
            for _ in range(CAP + QUEUE)
        ]
        await stack.until_queued(QUEUE)
        vip = await _ask(http, stack, log, "vip", 2, service_tier="priority")
        filled = await asyncio.gather(*batch)
    assert vip.status == 200, vip
    preempted = [a for a in filled if a.status != 200]
    assert len(preempted) == 1 and "higher priority class than 'batch'" in preempted[0].error
    # Only the streams already running finished before it; none was cut.
    before = [a for a in filled if a.status == 200 and a.done < vip.done]
    assert len(before) <= CAP, before
    assert all(a.finish == "length" and a.tokens == LONG for a in filled if a.status == 200)


async def test_max_priority_caps_the_class(stack: Stack) -> None:
    log = Log()
    async with httpx.AsyncClient(timeout=120) as http:
        waiting = [
            asyncio.create_task(_ask(http, stack, log, "filler", LONG)) for _ in range(CAP + QUEUE)
        ]
        await stack.until_queued(QUEUE)
        # Asks for interactive, may use default: no lower class to refuse.
        capped = await _ask(http, stack, log, "capped", 2, priority=-1)
        filled = await asyncio.gather(*waiting)
    assert capped.status == 503 and "already waiting" in capped.error, capped
    assert all(a.status == 200 for a in filled)


def _queue_seconds(stack: Stack, since: int) -> dict[str, tuple[int, float, float]]:
    """The ledger's requests, queue and total seconds per tenant."""
    query = {"start_time": str(since), "group_by": "tenant"}
    page = httpx.get(f"{stack.admin_url}/v1/usage", params=query, timeout=10).json()
    out: dict[str, tuple[int, float, float]] = {}
    for bucket in page["data"]:
        for r in bucket["results"]:
            out[r["tenant"]] = (r["num_model_requests"], r["queue_seconds"], r["total_seconds"])
    return out


async def test_the_ledger_counts_the_seconds_a_request_queued(stack: Stack) -> None:
    since = int(time.time()) - 60
    url = f"{stack.base_url}/v1/chat/completions"
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": HELD}
    body["stream"] = True
    headers = {"Authorization": f"Bearer {stack.keys['bulk']}"}
    log = Log()
    async with httpx.AsyncClient(timeout=120) as http, contextlib.AsyncExitStack() as streams:
        # bulk takes every slot: each stream has started (its first chunk
        # read) before the next is sent, so none of them queued.
        running = []
        for _ in range(CAP):
            stream = http.stream("POST", url, json=body, headers=headers)
            answer = await streams.enter_async_context(stream)
            lines = answer.aiter_lines()
            assert (await anext(lines)).startswith("data: {")
            running.append(lines)
        waiter = asyncio.create_task(_ask(http, stack, log, "waiter", 2))
        await stack.until_queued(1)
        for lines in running:  # bulk's streams end (10 s each): a slot frees
            async for _ in lines:
                pass
        assert (await waiter).status == 200

    def counted() -> bool:
        ledger = _queue_seconds(stack, since)
        return ledger.get("bulk", (0,))[0] == CAP and ledger.get("waiter", (0,))[0] == 1

    assert wait_until(counted, timeout_s=30), "the ledger never counted the requests"
    ledger = _queue_seconds(stack, since)
    _, bulk_queued, _ = ledger["bulk"]
    _, waiter_queued, waiter_total = ledger["waiter"]
    print(
        f"\nqueue seconds: bulk {bulk_queued:.3f}, waiter {waiter_queued:.3f} of {waiter_total:.3f}"
    )
    assert bulk_queued == 0.0
    assert 0.0 < waiter_queued < waiter_total
