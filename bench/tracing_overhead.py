"""What OpenTelemetry tracing costs on the hot path: the same streamed chat
workload through three cortexes, each in front of its own simulated neuron,
with tracing off, on at sample ratio 1.0 and on at 0.01 (cortex and neuron
alike, exporting to a real OTLP/gRPC receiver process, harness/
otlp_receiver.py), in paired rounds (A B C C B A) at concurrency 16.

The neurons are simulated (fixed time to first token and between tokens), so
the differences are cortex's and the neuron's own. Targets (issue 30): with
tracing off no measurable change; at 0.01 within 1 % (TTFT p50, tokens/s).
Besides, in this process: what the off path's helper calls cost a request
(no OpenTelemetry object is made, nor the SDK imported, with tracing off).

    make bench-tracing
    python -m bench.tracing_overhead --rounds 6 --requests-per-client 8
    python -m bench.tracing_overhead --smoke    # a few requests (make test)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import psutil

from axon import tracing
from harness.bench_stack import RESULTS, output_path, parser, write_summary
from harness.gateway import Sim, cortex, sim_neurons
from harness.otlp_receiver import otlp_receiver
from harness.paired import paired_rounds
from harness.plots import markdown_table, write_markdown
from harness.workload import MODEL, PROMPTS, Run, timed, via_cortex

Summary = dict[str, dict[str, float]]
# Each mode's tracing flags (cortex's and its neuron's alike).
MODES = {"off": None, "ratio 1.0": "1.0", "ratio 0.01": "0.01"}


def _flags(ratio: str | None, endpoint: str) -> list[str]:
    if ratio is None:
        return []
    return ["--otlp-endpoint", endpoint, "--trace-sample-ratio", ratio]


@contextmanager
def gateways_for(modes: list[str], logs: Path) -> Iterator[dict[str, tuple[str, psutil.Process]]]:
    """Per mode: its cortex's base URL and process (one worker), in front of
    a sim neuron of its own; the traced ones export to one receiver. All
    start at once, then are waited for."""
    logs.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        receiver = stack.enter_context(otlp_receiver(logs, "tracing"))
        flags = {mode: _flags(MODES[mode], receiver.endpoint) for mode in modes}
        sims = [Sim(MODEL, flags[mode]) for mode in modes]
        neurons = stack.enter_context(sim_neurons(logs, "tracing", sims))
        started = {}
        for mode, neuron in zip(modes, neurons, strict=True):
            log = logs / f"tracing-cortex-{mode.replace(' ', '-')}.log"
            started[mode] = cortex(log, [neuron.address], *flags[mode])
            stack.callback(started[mode].proc.stop)
        for running in started.values():
            running.wait_ready(timeout_s=120)
        yield {
            mode: (running.base_url, psutil.Process(running.proc.popen.pid))
            for mode, running in started.items()
        }


async def _run(base: str, concurrency: int, requests: int, tokens: int) -> Run:
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:

        async def one(i: int) -> tuple[float, int]:
            return await via_cortex(http, base, PROMPTS[i % len(PROMPTS)], tokens)

        return await timed(requests, concurrency, one)


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def measure(
    gateways: dict[str, tuple[str, psutil.Process]],
    concurrency: int,
    rounds: int,
    per_client: int,
    tokens: int,
) -> Summary:
    """Paired rounds; besides the pooled TTFT p50, the median of each round's
    paired difference with `off` (the modes run within seconds of each
    other) and cortex's own CPU time per request."""
    for base, _ in gateways.values():  # warm-up: connections, first spans
        asyncio.run(_run(base, 2, 4, 4))
    modes = list(gateways)

    def one(mode: str) -> Run:
        return asyncio.run(_run(gateways[mode][0], concurrency, concurrency * per_client, tokens))

    paired = paired_rounds(
        modes, rounds, one, f"c={concurrency:<3} tracing", lambda m: _cpu_s(gateways[m][1])
    )
    summary: Summary = {}
    for mode in modes:
        ttfts = paired.ttfts(mode)
        summary[mode] = {
            "ttft_p50_ms": statistics.median(ttfts) * 1000,
            "tokens_per_s": statistics.median(run.tokens_per_s for run in paired.runs(mode)),
            "requests": float(len(ttfts)),
            "cortex_cpu_us_per_request": paired.cpu_s[mode] / len(ttfts) * 1e6,
            "ttft_added_paired_ms": paired.added_ttft_ms(mode, "off"),
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


def _one_request() -> None:
    """The spans cortex makes for one streamed request, as its request path
    makes them (cortex/http/tracing.py, api/route.py, routing/attempts.py,
    the recorder's exemplars)."""
    tracer = tracing.tracer()
    assert tracer is not None
    headers = {"host": "127.0.0.1", "content-type": "application/json"}
    with tracer.start_as_current_span("POST /v1/chat/completions", tracing.extract(headers)):
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
        tracing.end(attempt)
        tracing.current_trace_id()


def span_path_us(ratio: float, repeats: int) -> float:
    """Microseconds of cortex's CPU a request's spans take at `ratio`, in
    this process, exported in batches to an exporter that drops them (what
    the export itself costs is the exporter thread's)."""
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

    tracing.install("neuraxis-bench", ratio, BatchSpanProcessor(Dropped()))
    try:
        for _ in range(repeats // 10):  # warm-up
            _one_request()
        started = time.process_time_ns()
        for _ in range(repeats):
            _one_request()
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
            s["tokens_per_s"],
            f"{s['tokens_per_s_ratio'] * 100:.1f}%",
            s["cortex_cpu_us_per_request"],
            int(s["requests"]),
        ]
        for mode, s in summary.items()
    ]
    headers = ["tracing", "TTFT p50 (ms)", "paired TTFT added (ms)", "output tokens/s"]
    headers += ["tokens/s vs off", "cortex CPU per request (µs)", "requests"]
    lines = [f"concurrency {concurrency}, sim neurons:", "", markdown_table(headers, rows), ""]
    for mode in [m for m in summary if m != "off"]:
        s = summary[mode]
        lines.append(
            f"tracing {mode}: {s['ttft_added_paired_ms']:+.2f} ms TTFT p50 (paired), "
            f"{s['tokens_per_s_ratio'] * 100:.1f}% of the tokens/s with tracing off"
        )
    lines.append(
        f"tracing off: {off_ns:.0f} ns of helper calls a request, no OpenTelemetry object "
        "made nor the SDK imported"
    )
    lines += ["", "In one process, cortex's spans of one request (CPU):", ""]
    lines.append(
        markdown_table(
            ["tracing", "µs per request"],
            [["off", off_ns / 1000], *([m, us] for m, us in in_process_us.items())],
        )
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
    args = cli.parse_args(argv)
    modes = list(MODES)
    if args.smoke:  # one traced mode: two gateways start sooner than three
        args.rounds, args.requests_per_client, args.max_tokens, args.concurrency = 1, 2, 4, 2
        modes = ["off", "ratio 1.0"]
    # --base-url is not used: the cortexes and their neurons are started here.
    with gateways_for(modes, RESULTS / "tracing_overhead-logs") as gateways:
        summary = measure(
            gateways, args.concurrency, args.rounds, args.requests_per_client, args.max_tokens
        )
    repeats = 1_000 if args.smoke else 200_000
    off_ns = off_path_ns(repeats)
    in_process = {
        "ratio 1.0": span_path_us(1.0, repeats // 10),
        "ratio 0.01": span_path_us(0.01, repeats // 10),
    }
    out = output_path(args, "tracing_overhead.json")
    report(summary, args.concurrency, off_ns, in_process, out)
    write_summary(
        out, {**summary, "off_path_ns_per_request": {"ns": off_ns}, "in_process_us": in_process}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
