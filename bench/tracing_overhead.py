"""What OpenTelemetry tracing costs on the hot path: the same streamed chat
workload through three cortexes, each in front of its own simulated neuron,
with tracing off, on at sample ratio 1.0 and on at 0.01 (cortex and neuron
alike, exporting to a real OTLP/gRPC receiver process, harness/
otlp_receiver.py), in paired rounds (A B C C B A) at concurrency 16.

The neurons are simulated (fixed time to first token and between tokens), so
the differences are cortex's and the neuron's own. Targets (issue 30): with
tracing off no measurable change; at 0.01 within 1 % (TTFT p50, tokens/s).
Besides, in this process: what the off path's helper calls cost a request
(no OpenTelemetry object is made, nor the SDK imported, with tracing off),
and cortex's request path's spans (its HTTP middleware included) per request.

The traced processes export every 200 ms (instead of 5 s), and after each
run the receiver is waited for until nothing more arrives, so that one
mode's export never lands in the next mode's run; the receiver's CPU is
counted to the mode whose spans it took. `--aa` adds a second arm with
tracing off: what two identical arms differ by is what this machine can
resolve.

    make bench-tracing
    python -m bench.tracing_overhead --rounds 6 --requests-per-client 8 --aa
    python -m bench.tracing_overhead --smoke    # a few requests (make test)
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import httpx
import psutil
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from axon import tracing
from cortex.http.tracing import TraceRequests
from harness.bench_stack import RESULTS, output_path, parser, write_summary
from harness.gateway import Sim, cortex, sim_neurons
from harness.otlp_receiver import Receiver, otlp_receiver
from harness.paired import paired_rounds
from harness.plots import markdown_table, write_markdown
from harness.polling import wait_until
from harness.workload import MODEL, PROMPTS, Run, timed, via_cortex

Summary = dict[str, dict[str, float]]
# A second arm with tracing off (--aa): the spread of two identical arms.
AA = "off (A/A)"
# Each mode's tracing flags (cortex's and its neuron's alike).
MODES = {"off": None, "ratio 1.0": "1.0", "ratio 0.01": "0.01", AA: None}
# Spans leave each traced process every 200 ms (not every 5 s), so that
# what a mode exports has arrived before the next mode's run starts.
EXPORT_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "200"}
# Nothing arrived at the receiver for this long: a mode's export is done.
QUIET_S = 0.6


def _flags(ratio: str | None, endpoint: str) -> list[str]:
    if ratio is None:
        return []
    return ["--otlp-endpoint", endpoint, "--trace-sample-ratio", ratio]


@dataclass(frozen=True)
class Arm:
    """One mode's cortex (its base URL and process) and its sim neuron's process."""

    base_url: str
    cortex: psutil.Process
    neuron: psutil.Process


@dataclass(frozen=True)
class Stack:
    arms: dict[str, Arm]
    receiver: Receiver

    def settled(self) -> None:
        """Until the receiver has had no span for QUIET_S: the last run's
        export is in."""
        sizes = [-1]

        def quiet() -> bool:
            sizes.append(self.receiver.out.stat().st_size)
            return sizes[-1] == sizes[-2]

        assert wait_until(quiet, timeout_s=60, interval_s=QUIET_S), "spans kept arriving"


@contextmanager
def gateways_for(modes: list[str], logs: Path) -> Iterator[Stack]:
    """Per mode, a cortex (one worker) in front of a sim neuron of its own;
    the traced ones export to one receiver. All start at once, then are
    waited for."""
    logs.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, EXPORT_ENV))
        receiver = stack.enter_context(otlp_receiver(logs, "tracing"))
        flags = {mode: _flags(MODES[mode], receiver.endpoint) for mode in modes}
        sims = [Sim(MODEL, flags[mode]) for mode in modes]
        neurons = stack.enter_context(sim_neurons(logs, "tracing", sims))
        started = {}
        for mode, neuron in zip(modes, neurons, strict=True):
            name = re.sub(r"[^a-z0-9.]+", "-", mode.lower()).strip("-")
            log = logs / f"tracing-cortex-{name}.log"
            started[mode] = cortex(log, [neuron.address], *flags[mode])
            stack.callback(started[mode].proc.stop)
        for running in started.values():
            running.wait_ready(timeout_s=120)
        arms = {
            mode: Arm(
                running.base_url,
                psutil.Process(running.proc.popen.pid),
                psutil.Process(neuron.proc.popen.pid),
            )
            for (mode, running), neuron in zip(started.items(), neurons, strict=True)
        }
        yield Stack(arms, receiver)


async def _run(base: str, concurrency: int, requests: int, tokens: int) -> Run:
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:

        async def one(i: int) -> tuple[float, int]:
            return await via_cortex(http, base, PROMPTS[i % len(PROMPTS)], tokens)

        return await timed(requests, concurrency, one)


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def measure(stack: Stack, concurrency: int, rounds: int, per_client: int, tokens: int) -> Summary:
    """Paired rounds; besides the pooled TTFT p50, each round's paired
    difference and ratio with `off` (the modes run within seconds of each
    other), and the CPU time per request of cortex, its neuron and the
    receiver (counted around each run and its export)."""
    for arm in stack.arms.values():  # warm-up: connections, first spans
        asyncio.run(_run(arm.base_url, 2, 4, 4))
    stack.settled()
    modes = list(stack.arms)
    cpu = {mode: dict.fromkeys(("neuron", "receiver"), 0.0) for mode in modes}
    receiver = psutil.Process(stack.receiver.proc.pid)

    def one(mode: str) -> Run:
        arm = stack.arms[mode]
        before = _cpu_s(arm.neuron), _cpu_s(receiver)
        run = asyncio.run(_run(arm.base_url, concurrency, concurrency * per_client, tokens))
        stack.settled()
        cpu[mode]["neuron"] += _cpu_s(arm.neuron) - before[0]
        cpu[mode]["receiver"] += _cpu_s(receiver) - before[1]
        return run

    paired = paired_rounds(
        modes, rounds, one, f"c={concurrency:<3} tracing", lambda m: _cpu_s(stack.arms[m].cortex)
    )
    summary: Summary = {}
    for mode in modes:
        ttfts = paired.ttfts(mode)
        ratios = paired.paired_ratios(mode, "off")
        summary[mode] = {
            "ttft_p50_ms": statistics.median(ttfts) * 1000,
            "tokens_per_s": statistics.median(run.tokens_per_s for run in paired.runs(mode)),
            "requests": float(len(ttfts)),
            "cortex_cpu_us_per_request": paired.cpu_s[mode] / len(ttfts) * 1e6,
            "neuron_cpu_us_per_request": cpu[mode]["neuron"] / len(ttfts) * 1e6,
            "receiver_cpu_us_per_request": cpu[mode]["receiver"] / len(ttfts) * 1e6,
            "ttft_added_paired_ms": paired.added_ttft_ms(mode, "off"),
            "ttft_p50_ratio_paired": ratios["ttft_p50"],
            "tokens_per_s_ratio_paired": ratios["tokens_per_s"],
        }
    for mode in modes:
        summary[mode]["tokens_per_s_ratio"] = (
            summary[mode]["tokens_per_s"] / summary["off"]["tokens_per_s"]
        )
    return summary


def off_path_ns(repeats: int) -> float:
    """Nanoseconds of the helper calls one request makes with tracing off
    (the route's, the attempt's and the recorder's checks)."""
    assert not tracing.enabled()
    started = time.perf_counter_ns()
    for _ in range(repeats):
        with tracing.span("neuraxis.admission"):
            pass
        span = tracing.start("neuraxis.attempt") if tracing.enabled() else None
        tracing.metadata_for(span)
        tracing.end(span)
        tracing.current_trace_id()
        tracing.current_trace_id()
    return (time.perf_counter_ns() - started) / repeats


async def _handler(scope: Scope, receive: Receive, send: Send) -> None:
    """The spans cortex's handler makes for one streamed request, as its
    request path makes them (api/route.py, routing/attempts.py, the
    recorder's exemplars), and a streamed answer of 33 messages."""
    with tracing.span("neuraxis.authenticate") as auth:
        tracing.annotate(auth, {"neuraxis.tenant": ""})
    with tracing.span("neuraxis.admission", {"gen_ai.request.model": MODEL}):
        pass
    with tracing.span("neuraxis.route", {"neuraxis.attempt": 0}) as route:
        tracing.annotate(route, {"neuraxis.routing.neuron": "127.0.0.1:1"})
    attempt = tracing.start("neuraxis.attempt", {"neuraxis.attempt": 0})
    tracing.metadata_for(attempt)
    if attempt is not None:
        attempt.add_event("first_message")
    tracing.current_trace_id()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for _ in range(32):
        await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
    tracing.end(attempt)
    tracing.current_trace_id()
    await send({"type": "http.response.body", "body": b""})


async def _requests(app: ASGIApp, count: int) -> None:
    """`count` requests through `app`."""
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        pass

    for _ in range(count):
        await app({**scope, "headers": headers}, receive, send)


def span_path_us(ratio: float | None, repeats: int) -> float:
    """Microseconds of cortex's CPU a request's path takes at `ratio` (None:
    tracing off, the middleware not mounted), in this process, its spans
    exported in batches to an exporter that drops them (what the export
    itself costs is the exporter thread's)."""
    from collections.abc import Sequence

    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    app: ASGIApp = _handler
    if ratio is not None:
        tracing.install("neuraxis-bench", ratio, BatchSpanProcessor(Dropped()))
        app = TraceRequests(_handler)
    try:
        asyncio.run(_requests(app, repeats // 10))  # warm-up
        started = time.process_time_ns()
        asyncio.run(_requests(app, repeats))
        return (time.process_time_ns() - started) / repeats / 1000
    finally:
        tracing.shutdown()


def report(
    summary: Summary,
    concurrency: int,
    off_ns: float,
    in_process_us: dict[str, float],
    out: Path | None,
) -> None:
    rows: list[list[object]] = [
        [
            mode,
            s["ttft_p50_ms"],
            s["ttft_added_paired_ms"],
            f"{s['ttft_p50_ratio_paired'] * 100:.1f}%",
            s["tokens_per_s"],
            f"{s['tokens_per_s_ratio_paired'] * 100:.1f}%",
            s["cortex_cpu_us_per_request"],
            s["neuron_cpu_us_per_request"],
            s["receiver_cpu_us_per_request"],
            int(s["requests"]),
        ]
        for mode, s in summary.items()
    ]
    headers = ["tracing", "TTFT p50 (ms)", "paired TTFT added (ms)", "paired TTFT p50 vs off"]
    headers += ["output tokens/s", "paired tokens/s vs off", "cortex CPU per request (µs)"]
    headers += ["neuron CPU per request (µs)", "receiver CPU per request (µs)", "requests"]
    lines = [f"concurrency {concurrency}, sim neurons:", "", markdown_table(headers, rows), ""]
    for mode in [m for m in summary if m != "off"]:
        s = summary[mode]
        lines.append(
            f"tracing {mode}: {s['ttft_added_paired_ms']:+.2f} ms TTFT p50 "
            f"({s['ttft_p50_ratio_paired'] * 100:.1f}% of off's, paired), "
            f"{s['tokens_per_s_ratio_paired'] * 100:.1f}% of the tokens/s with tracing off "
            f"(paired; pooled {s['tokens_per_s_ratio'] * 100:.1f}%)"
        )
    lines.append(
        f"tracing off: {off_ns:.0f} ns of helper calls a request, no OpenTelemetry object "
        "made nor the SDK imported"
    )
    lines += ["", "In one process, cortex's request path of one streamed request (CPU):", ""]
    lines.append(
        markdown_table(["tracing", "µs per request"], [[m, us] for m, us in in_process_us.items()])
    )
    text = "\n".join(lines)
    print()
    print(text)
    if out is not None:
        write_markdown(out.parent, "tracing_overhead", text)


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=4, help="paired rounds")
    cli.add_argument(
        "--requests-per-client", type=int, default=8, help="requests per run, per client"
    )
    cli.add_argument("--max-tokens", type=int, default=32)
    cli.add_argument("--concurrency", type=int, default=16)
    cli.add_argument(
        "--aa",
        action="store_true",
        help=f"add a second arm with tracing off ({AA!r}); four modes: rounds in fours "
        "(harness/paired.py's balanced order)",
    )
    args = cli.parse_args(argv)
    modes = [mode for mode in MODES if mode != AA or args.aa]
    if args.smoke:  # one traced mode: two gateways start sooner than three
        args.rounds, args.requests_per_client, args.max_tokens, args.concurrency = 1, 2, 4, 2
        modes = ["off", "ratio 1.0"]
    # --base-url is not used: the cortexes and their neurons are started here.
    with gateways_for(modes, RESULTS / "tracing_overhead-logs") as stack:
        summary = measure(
            stack, args.concurrency, args.rounds, args.requests_per_client, args.max_tokens
        )
    repeats = 1_000 if args.smoke else 200_000
    off_ns = off_path_ns(repeats)
    in_process = {
        "off": span_path_us(None, repeats // 40),
        "ratio 1.0": span_path_us(1.0, repeats // 40),
        "ratio 0.01": span_path_us(0.01, repeats // 40),
    }
    out = output_path(args, "tracing_overhead.json")
    report(summary, args.concurrency, off_ns, in_process, out)
    write_summary(
        out, {**summary, "off_path_ns_per_request": {"ns": off_ns}, "in_process_us": in_process}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
