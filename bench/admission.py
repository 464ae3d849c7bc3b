"""Admission control under overload: the same open-loop workload at 4× what
one simulated replica can serve, through a cortex with admission control
(a replica cap and a bounded queue) and through one without it, in front of
the same neuron, one after the other in one run.

The sim neuron models a real engine's bottleneck with its prefill lane
(`--sim-prefix-cache-blocks 1`, so every prompt misses, and a prefill time
per token): prefills take turns, so the engine serves about
1 / prefill_s requests per second and, unlimited, queues the rest inside
itself where cortex cannot bound them. Arrivals are Poisson at 4× that rate.
For each mode: the latency of the 503 `model_overloaded` rejections (p50,
p99), and the goodput of the admitted requests: completed within the latency
bound per second of the arrival window, and completed tokens per second.
Requests still unanswered after the client timeout count as timed out.

    make bench-admission
    python -m bench.admission --seconds 20 --overload 4
    python -m bench.admission --smoke    # a few requests (make test)
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness.bench_stack import logs_dir, output_path, parser, write_summary
from harness.gateway import Sim, running_cortex, sim_neurons
from harness.plots import bar_plot, markdown_table, write_markdown
from harness.procs import engine_load
from harness.ratios import ratio

MODEL = "sim-admission"
MODES = ("admission", "unlimited")
PROMPT_CHARS = 400  # 100 sim tokens at 4 characters a token
Summary = dict[str, dict[str, float]]


@dataclass(frozen=True)
class Workload:
    prefill_s: float  # per request: the engine's lane serves 1 / prefill_s per second
    tokens: int
    itl_s: float
    overload: float
    seconds: float
    cap: int
    queue: int
    queue_timeout_s: float
    bound_s: float  # a request answered later than this is not goodput
    client_timeout_s: float

    @property
    def capacity_rps(self) -> float:
        return 1.0 / self.prefill_s

    @property
    def rate(self) -> float:
        return self.capacity_rps * self.overload


@dataclass
class Outcomes:
    ok: list[tuple[float, int]] = field(default_factory=list)  # latency, completion tokens
    rejected: list[float] = field(default_factory=list)  # latencies of 503 model_overloaded
    other: int = 0  # other errors and client timeouts
    window_s: float = 0.0


@contextmanager
def gateways(logs: Path, w: Workload) -> Iterator[tuple[dict[str, str], str]]:
    """One sim neuron and two cortexes in front of it; base URLs by mode and
    the neuron's address."""
    logs.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="neuraxis-bench-admission-"))
    neuron = ["--sim-ttft-s", "0", "--sim-itl-s", str(w.itl_s)]
    per_token = w.prefill_s / (PROMPT_CHARS / 4)
    neuron += ["--sim-prefix-cache-blocks", "1", "--sim-prefill-s-per-token", str(per_token)]
    caps = {
        "admission": ["--replica-max-concurrency", str(w.cap)],
        "unlimited": ["--replica-max-concurrency", "-1"],
    }
    with ExitStack() as stack:
        (sim,) = stack.enter_context(sim_neurons(logs, "admission", [Sim(MODEL, neuron)]))
        bases: dict[str, str] = {}
        for mode in MODES:
            args = ["--model", MODEL, "--state-dir", str(state / mode), *caps[mode]]
            args += ["--admission-queue-size", str(w.queue)]
            args += ["--admission-queue-timeout-s", str(w.queue_timeout_s)]
            log = logs / f"admission-cortex-{mode}.log"
            running = running_cortex(log, [sim.address], *args, timeout_s=120)
            bases[mode] = stack.enter_context(running).base_url
        yield bases, sim.address


def _body(w: Workload) -> dict[str, object]:
    # A new prompt each time: the sim's one-block cache never helps.
    text = (uuid.uuid4().hex + " ") * (PROMPT_CHARS // 33)
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text[:PROMPT_CHARS]}],
        "max_tokens": w.tokens,
    }


async def _one(http: httpx.AsyncClient, base: str, w: Workload, out: Outcomes) -> None:
    started = time.perf_counter()
    try:
        response = await http.post(f"{base}/v1/chat/completions", json=_body(w))
    except httpx.HTTPError:
        out.other += 1
        return
    elapsed = time.perf_counter() - started
    if response.status_code == 200:
        out.ok.append((elapsed, int(response.json()["usage"]["completion_tokens"])))
    elif response.status_code == 503 and "model_overloaded" in response.text:
        out.rejected.append(elapsed)
    else:
        out.other += 1


async def _run(base: str, w: Workload, seed: int) -> Outcomes:
    """Poisson arrivals at w.rate for w.seconds; every request awaited."""
    rng = random.Random(seed)
    out = Outcomes()
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=w.client_timeout_s, limits=limits) as http:
        tasks: list[asyncio.Task[None]] = []
        started = time.perf_counter()
        next_at = 0.0
        while next_at < w.seconds:
            delay = started + next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(http, base, w, out)))
            next_at += rng.expovariate(w.rate)
        out.window_s = time.perf_counter() - started
        await asyncio.gather(*tasks)
    return out


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(out: Outcomes, w: Workload) -> dict[str, float]:
    latencies = [latency for latency, _ in out.ok]
    within = [(latency, tokens) for latency, tokens in out.ok if latency <= w.bound_s]
    sent = len(out.ok) + len(out.rejected) + out.other
    return {
        "sent": float(sent),
        "completed": float(len(out.ok)),
        "rejected": float(len(out.rejected)),
        "other": float(out.other),
        "reject_p50_ms": _quantile(out.rejected, 0.5) * 1000,
        "reject_p99_ms": _quantile(out.rejected, 0.99) * 1000,
        "ok_p50_s": _quantile(latencies, 0.5),
        "ok_p99_s": _quantile(latencies, 0.99),
        "goodput_rps": ratio(len(within), out.window_s),
        "goodput_tokens_per_s": ratio(sum(t for _, t in within), out.window_s),
        "completed_tokens_per_s": ratio(sum(t for _, t in out.ok), out.window_s),
    }


def _drained(neuron: str, timeout_s: float) -> None:
    """Wait until the engine has nothing left from the previous run."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        load = engine_load(neuron)
        if load.running + load.waiting == 0:
            return
        time.sleep(0.2)


def report(summary: Summary, w: Workload, out_dir: Path | None) -> str:
    header = [
        "mode",
        "sent",
        "completed",
        "503 overloaded",
        "other/timeout",
        "503 p50 (ms)",
        "503 p99 (ms)",
        "completed p50 (s)",
        "completed p99 (s)",
        f"goodput req/s (≤ {w.bound_s:g} s)",
        "goodput tokens/s",
        "completed tokens/s",
    ]
    rows: list[list[object]] = []
    for mode in MODES:
        s = summary[mode]
        rows.append(
            [
                mode,
                int(s["sent"]),
                int(s["completed"]),
                int(s["rejected"]),
                int(s["other"]),
                s["reject_p50_ms"],
                s["reject_p99_ms"],
                s["ok_p50_s"],
                s["ok_p99_s"],
                s["goodput_rps"],
                s["goodput_tokens_per_s"],
                s["completed_tokens_per_s"],
            ]
        )
    text = "\n".join(
        [
            f"Offered {w.rate:.1f} req/s for {w.seconds:g} s ({w.overload:g}× the replica's "
            f"{w.capacity_rps:.1f} req/s); admission: cap {w.cap}, queue {w.queue}, "
            f"queue timeout {w.queue_timeout_s:g} s; client timeout {w.client_timeout_s:g} s.",
            "",
            markdown_table(header, rows),
        ]
    )
    print()
    print(text)
    if out_dir is not None:
        write_markdown(out_dir, "admission", text)
        bar_plot(
            out_dir,
            "admission_goodput",
            {mode: {"goodput req/s": summary[mode]["goodput_rps"]} for mode in MODES},
            f"requests/s completed within {w.bound_s:g} s",
            f"Goodput at {w.overload:g}× overload (sim replica)",
        )
    return text


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--seconds", type=float, default=20.0, help="arrival window per mode")
    cli.add_argument("--overload", type=float, default=4.0, help="offered load / capacity")
    cli.add_argument("--prefill-s", type=float, default=0.1, help="sim prefill per request")
    cli.add_argument("--cap", type=int, default=4, help="replica_max_concurrency")
    cli.add_argument("--queue", type=int, default=8, help="admission_queue_size")
    cli.add_argument("--queue-timeout-s", type=float, default=2.0)
    cli.add_argument("--bound-s", type=float, default=2.0, help="latency bound of goodput")
    cli.add_argument("--client-timeout-s", type=float, default=20.0)
    args = cli.parse_args(argv)
    if args.smoke:
        args.seconds, args.client_timeout_s = 1.0, 5.0
    w = Workload(
        prefill_s=args.prefill_s,
        tokens=16,
        itl_s=0.01,
        overload=args.overload,
        seconds=args.seconds,
        cap=args.cap,
        queue=args.queue,
        queue_timeout_s=args.queue_timeout_s,
        bound_s=args.bound_s,
        client_timeout_s=args.client_timeout_s,
    )
    # --base-url is not used: the neuron and both cortexes are started here.
    summary: Summary = {}
    out = output_path(args, "admission.json")
    logs = logs_dir(out, "admission-logs")
    with gateways(logs, w) as (bases, neuron):
        for i, mode in enumerate(MODES):
            _drained(neuron, 60)
            outcomes = asyncio.run(_run(bases[mode], w, seed=i))
            summary[mode] = summarize(outcomes, w)
            print(f"  {mode}: {summary[mode]}", flush=True)
    report(summary, w, out.parent if out is not None else None)
    write_summary(out, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
