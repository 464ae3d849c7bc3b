"""What the limited path costs a request in cortex's own process, piece by
piece, timed in a loop on one event loop: the figures the end-to-end runs
of bench/auth_cost.py cannot resolve (their run-to-run spread at c=16 is a
few milliseconds, the cost tens of microseconds).

- the cached key lookup (`Authenticator.principal`),
- the reservation and its settlement (`Limiter.admit`, `Admission.part_ended`)
  on the counters in memory (`rate_limit_counters = auto`, one process),
- the usage hook on a 34-message neuron stream (against the same stream
  tracked without it),
- the x-ratelimit-* headers middleware on a 34-message response (against
  the bare app),
- the usage ledger's account of a finished request (the same stream
  tracked without one; the flush is off the request's path).

At c=16 with synchronized arrivals, the last of sixteen requests waits for
the fifteen ahead of it, so the added TTFT p50 is bounded by about
8 x the per-request cost before the first token (lookup + admission +
headers), plus what the streams in flight add per message.

    python -m bench.auth_inprocess
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from starlette.types import Message, Receive, Scope, Send

from axon.v1 import neuron_pb2 as pb
from cortex.api.accounting import account_for
from cortex.api.lifecycle import Tracker, tracked
from cortex.auth.authenticator import Authenticator
from cortex.auth.keys import KeyRequest, make_key
from cortex.auth.limiter import Limiter
from cortex.auth.local_usage import counters_for
from cortex.http.ratelimit_headers import RateLimitHeaders
from cortex.recording import NoRecorder
from cortex.store.ledger import Ledger
from cortex.store.sqlite_keys import SqliteKeyStore
from cortex.store.sqlite_tenants import SqliteTenantStore

MESSAGES = 34  # a 32-token answer: the role chunk, 32 tokens, the usage


async def _per_call(loops: int, call: Callable[[], Awaitable[object]]) -> float:
    """Microseconds a call, best of three rounds (the least disturbed)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(loops):
            await call()
        best = min(best, (time.perf_counter() - started) / loops * 1e6)
    return best


async def measure(loops: int) -> dict[str, float]:
    store = SqliteKeyStore(Path(tempfile.mkdtemp(prefix="neuraxis-auth-")) / "keys.sqlite3")
    request = KeyRequest("bench", [], rpm=10**6, tpm=10**9, max_concurrent=10**6)
    secret, record = make_key(request, int(time.time()))
    await store.add(record)
    limiter = Limiter(counters_for(store, local=True), time.time, lease_s=600)
    authenticator = Authenticator(store, time.time)
    header = f"Bearer {secret}"
    principal = await authenticator.principal(header)

    async def admit_and_settle() -> None:
        admission = await limiter.admit(principal, 100)
        admission.part_ended(50)

    messages = [pb.GenerateResponse() for _ in range(MESSAGES)]

    async def neuron() -> AsyncIterator[pb.GenerateResponse]:
        for message in messages:
            yield message

    admission = await limiter.admit(principal, 100)

    tenants = SqliteTenantStore(Path(tempfile.mkdtemp(prefix="neuraxis-ledger-")) / "t.sqlite3")
    account = account_for(principal, "m", Ledger(tenants, flush_s=3600), tenant_tokens=False)

    async def read(hooked: bool, accounted: bool = False) -> None:
        tracker = Tracker(
            NoRecorder(), "chat", "m", "chatcmpl-bench", account=account if accounted else None
        )
        hook = admission.stream_ended if hooked else None
        async for _ in tracked(neuron(), tracker, hook):
            pass

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(MESSAGES):
            await send({"type": "http.response.body", "body": b"x", "more_body": True})

    async def sink(message: Message) -> None:
        pass

    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    scope: Scope = {"type": "http", "state": {"principal": principal, "ratelimit": {"a": "1"}}}
    middleware = RateLimitHeaders(app, limiter)
    figures = {
        "key lookup (cached)": await _per_call(loops, lambda: authenticator.principal(header)),
        "admit + settle": await _per_call(loops, admit_and_settle),
        "usage hook on a stream": await _per_call(loops, lambda: read(True))
        - await _per_call(loops, lambda: read(False)),
        "headers middleware on a response": await _per_call(
            loops, lambda: middleware(scope, nothing, sink)
        )
        - await _per_call(loops, lambda: app(scope, nothing, sink)),
        "usage ledger account": await _per_call(loops, lambda: read(False, accounted=True))
        - await _per_call(loops, lambda: read(False)),
    }
    await limiter.drain()
    await store.close()
    await tenants.close()
    figures["total"] = sum(figures.values())
    return figures


def report(figures: dict[str, float]) -> str:
    lines = ["| piece | µs a request |", "|---|---|"]
    lines += [f"| {name} | {us:.1f} |" for name, us in figures.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    smoke = "--smoke" in (argv if argv is not None else sys.argv[1:])
    print(report(asyncio.run(measure(50 if smoke else 5000))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
