"""`python -m bench.token_stream`: the CPU per output token in cortex and in
the neuron with each token stream between them (`[pool] token_stream`:
per-request, a Generate call per request and a gRPC message per token;
batched, one Session stream per neuron and a message per engine step;
issue 29 point 1).

One sim neuron process with an instant engine (no time to first token,
none between tokens), so that the gateway's work is all there is, and one
cortex (one worker) in front of it, started anew for each transport in A B
B A order (harness/paired.py's reason: a drift of the machine falls on both
alike). At each concurrency the client (harness/sse_load.py: raw asyncio
sockets, its own CPU reported) keeps N streams of MAX_TOKENS tokens going
back to back for a few seconds; cortex's and the neuron's CPU time (user +
system, psutil) over that time, divided by the output tokens the finished
streams carried, is the figure. Rounds: medians printed, with the ratio
batched / per-request.

Writes bench/results/token_stream/ (or --out): token_stream.md and .json.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness import gateway, plots
from harness.bench_stack import RESULTS, parser, write_summary
from harness.gateway import Sim, sim_neuron
from harness.ratios import ratio
from harness.sse_load import Level, run_level

MODEL = "sim-model"
MAX_TOKENS = 50
TRANSPORTS = ("per-request", "batched")
CONCURRENCY = (16, 64)
LEVEL_S = 5.0
ROUNDS = 3
SMOKE_CONCURRENCY = (4,)
SMOKE_LEVEL_S = 1.0
INSTANT = ["--sim-ttft-s", "0", "--sim-itl-s", "0"]


@dataclass(frozen=True)
class Sample:
    transport: str
    streams: int
    tokens: int
    cortex_cpu_s: float
    neuron_cpu_s: float
    client_cpu_s: float
    wall_s: float
    errors: int

    def per_token_us(self, cpu_s: float) -> float:
        return cpu_s / self.tokens * 1e6 if self.tokens else 0.0

    @property
    def cortex_us(self) -> float:
        return self.per_token_us(self.cortex_cpu_s)

    @property
    def neuron_us(self) -> float:
        return self.per_token_us(self.neuron_cpu_s)


def cpu_s(process: psutil.Process) -> float:
    """User + system CPU seconds of a process and its children so far."""
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        try:
            times = p.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


@contextmanager
def cortex(neuron: str, transport: str, logs: Path) -> Iterator[tuple[str, psutil.Process]]:
    log = logs / f"cortex-{transport}.log"
    flags = ["--model", MODEL, "--pool-token-stream", transport]
    with gateway.running_cortex(log, [neuron], *flags, ready=f"/v1/models/{MODEL}") as running:
        yield running.base_url, psutil.Process(running.proc.popen.pid)


def measure(
    base: str,
    transport: str,
    streams: int,
    seconds: float,
    front: psutil.Process,
    neuron: psutil.Process,
) -> Sample:
    before = cpu_s(front), cpu_s(neuron)
    level: Level = asyncio.run(run_level(base, MODEL, streams, seconds, MAX_TOKENS))
    after = cpu_s(front), cpu_s(neuron)
    return Sample(
        transport,
        streams,
        level.requests * MAX_TOKENS,  # every counted stream ran to its end
        after[0] - before[0],
        after[1] - before[1],
        level.client_cpu_s,
        level.wall_s,
        level.errors,
    )


def rounds(
    neuron: str,
    proc: psutil.Process,
    n: int,
    levels: tuple[int, ...],
    seconds: float,
    logs: Path,
) -> list[Sample]:
    """`n` rounds, each transport once a round, in A B B A order."""
    samples: list[Sample] = []
    for i in range(n):
        order = TRANSPORTS if i % 2 == 0 else TRANSPORTS[::-1]
        for transport in order:
            with cortex(neuron, transport, logs) as (base, front):
                asyncio.run(run_level(base, MODEL, 4, 0.5, MAX_TOKENS))  # warm-up
                for streams in levels:
                    s = measure(base, transport, streams, seconds, front, proc)
                    samples.append(s)
                    print(
                        f"  round {i + 1} {transport:<11} c={streams:<3} "
                        f"{s.tokens / s.wall_s:8.0f} tokens/s  cortex {s.cortex_us:6.1f} µs/token"
                        f"  neuron {s.neuron_us:6.1f} µs/token  client "
                        f"{s.client_cpu_s / s.wall_s:.2f} cores  errors {s.errors}",
                        flush=True,
                    )
    return samples


def report(samples: list[Sample], levels: tuple[int, ...], out: Path | None) -> None:
    rows: list[list[object]] = []
    summary: dict[str, object] = {}
    for streams in levels:
        medians: dict[str, tuple[float, float, float]] = {}
        for transport in TRANSPORTS:
            mine = [s for s in samples if s.transport == transport and s.streams == streams]
            medians[transport] = (
                statistics.median(s.cortex_us for s in mine),
                statistics.median(s.neuron_us for s in mine),
                statistics.median(s.tokens / s.wall_s for s in mine),
            )
            summary[f"{transport}/c{streams}"] = {
                "cortex_us_per_token": [s.cortex_us for s in mine],
                "neuron_us_per_token": [s.neuron_us for s in mine],
                "tokens_per_s": [s.tokens / s.wall_s for s in mine],
                "errors": sum(s.errors for s in mine),
            }
        for transport in TRANSPORTS:
            c, nu, tps = medians[transport]
            base_c, base_n, _ = medians[TRANSPORTS[0]]
            rows.append([streams, transport, c, nu, c + nu, ratio(c + nu, base_c + base_n), tps])
    header = [
        "concurrency",
        "token stream",
        "cortex CPU µs/token",
        "neuron CPU µs/token",
        "both",
        "both vs per-request",
        "tokens/s",
    ]
    text = plots.markdown_table(header, rows)
    print(text)
    if out is not None:
        written = plots.write_markdown(out, "token_stream", text)
        write_summary(out / "token_stream.json", summary)
        print(f"wrote {written} and {out / 'token_stream.json'}")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of both transports")
    args = p.parse_args()
    smoke = bool(args.smoke)
    levels = SMOKE_CONCURRENCY if smoke else CONCURRENCY
    seconds = SMOKE_LEVEL_S if smoke else LEVEL_S
    n = 1 if smoke else args.rounds
    out: Path | None = args.out
    if out is None and not smoke:
        out = RESULTS / "token_stream"
    logs = (out or RESULTS / "token_stream-smoke") / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    neuron = sim_neuron(logs / "neuron.log", Sim(MODEL, INSTANT))
    try:
        process = psutil.Process(neuron.proc.popen.pid)
        samples = rounds(neuron.address, process, n, levels, seconds, logs)
    finally:
        neuron.proc.stop()
    report(samples, levels, out)


if __name__ == "__main__":
    main()
