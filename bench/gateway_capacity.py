"""`make bench-gateway`: how many concurrent streams, and SSE events a
second, one cortex sustains while adding under 5 ms to the p99 inter-token
latency; then the same with `--workers 2`.

The replicas are sim neurons doing almost nothing (harness/sim_farm.py: no
time to first token, a fixed `ITL_S` between tokens), so what grows with
the load is cortex's own work. The client (harness/sse_load.py) keeps N
keep-alive connections streaming back to back and times the gaps between
content frames; the added inter-token latency is a gap minus the engine's
`ITL_S`. (It also holds whatever delay the farm's own event loop adds, so
it overstates cortex's share a little.) Concurrency rises level by level
until the p99 added latency passes the limit twice.

The client is not the limit: it reports its own CPU use per level (raw
asyncio sockets, no JSON, no HTTP library), printed beside the figures; a
level where it nears one core is marked.

`--profile` instead records cortex (one worker) with py-spy at one
concurrency and prints the functions that take the most time.

Writes bench/results/gateway_capacity/ (or --out): gateway.md, gateway.json,
events_per_s.png, added_itl_p99.png.
"""

from __future__ import annotations

import asyncio
import collections
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from harness import gateway, plots
from harness.bench_stack import RESULTS, parser, write_summary
from harness.procs import Proc
from harness.sim_farm import FarmOptions, start_farm
from harness.sse_load import Level, run_direct, run_level

MODEL = "sim-model"
ITL_S = 0.01
MAX_TOKENS = 50
LIMIT_MS = 5.0
LEVELS = (8, 16, 32, 64, 96, 128, 192, 256, 384, 512)
LEVEL_S = 6.0
SMOKE_LEVELS = (2, 4)
SMOKE_LEVEL_S = 1.0
CLIENT_BUSY = 0.8  # cores: past this, the client may be what limits a level


@contextmanager
def cortex(
    neurons: Sequence[str], workers: int, log_dir: Path, token_stream: str = "per-request"
) -> Iterator[tuple[str, Proc]]:
    log = log_dir / f"cortex-workers{workers}.log"
    flags = ["--workers", str(workers), "--pool-token-stream", token_stream]
    with gateway.running_cortex(log, neurons, *flags, ready=f"/v1/models/{MODEL}") as running:
        _wait_every_worker(running.base_url, workers)
        yield running.base_url, running.proc


def _wait_every_worker(base: str, workers: int) -> None:
    """Until several answers in a row list the model: each worker has its own
    pool, and connections land on any worker."""
    deadline = time.monotonic() + 60
    ok = 0
    while ok < 10 * workers:
        if time.monotonic() > deadline:
            raise RuntimeError("cortex's workers did not all see the neurons in 60 s")
        fine = httpx.get(f"{base}/v1/models/{MODEL}", timeout=5).status_code == 200
        ok = ok + 1 if fine else 0
        time.sleep(0.05)


def added_p99_ms(level: Level) -> float:
    if len(level.gaps) < 2:
        return 0.0
    p99 = statistics.quantiles(level.gaps, n=100, method="inclusive")[98]
    return max(p99 - ITL_S, 0.0) * 1000


def ramp(base: str, levels: Sequence[int], seconds: float, label: str) -> list[Level]:
    asyncio.run(run_level(base, MODEL, 4, 0.5, MAX_TOKENS))  # warm-up
    out: list[Level] = []
    over = 0
    for streams in levels:
        level = asyncio.run(run_level(base, MODEL, streams, seconds, MAX_TOKENS))
        out.append(level)
        busy = " (client busy)" if level.client_cpu > CLIENT_BUSY else ""
        print(
            f"  {label:<10} {streams:>4} streams: {level.events_per_s:8.0f} events/s  "
            f"p99 added ITL {added_p99_ms(level):6.2f} ms  errors {level.errors}  "
            f"client {level.client_cpu:.2f} cores{busy}",
            flush=True,
        )
        over += added_p99_ms(level) > LIMIT_MS or level.errors > 0
        if over >= 2:
            break
    return out


def best(levels: Sequence[Level]) -> Level | None:
    """The highest concurrency within the limit (without errors)."""
    ok = [x for x in levels if added_p99_ms(x) <= LIMIT_MS and x.errors == 0]
    return max(ok, key=lambda x: x.streams) if ok else None


def report(runs: dict[str, list[Level]], floor: Level, out: Path | None) -> None:
    header = ["cortex", "streams", "events/s", "p99 added ITL (ms)", "client CPU (cores)", "errors"]
    rows: list[list[object]] = []
    summary: dict[str, Any] = {}
    for label, levels in runs.items():
        rows += [
            [label, x.streams, x.events_per_s, added_p99_ms(x), x.client_cpu, x.errors]
            for x in levels
        ]
        top = best(levels)
        summary[label] = {
            "max_streams": top.streams if top else 0,
            "events_per_s": top.events_per_s if top else 0.0,
            "levels": [
                {
                    "streams": x.streams,
                    "events_per_s": x.events_per_s,
                    "p99_added_ms": added_p99_ms(x),
                }
                for x in levels
            ],
        }
    verdict = plots.markdown_table(
        ["cortex", f"most streams with p99 added ITL < {LIMIT_MS:.0f} ms", "events/s there"],
        [[k, summary[k]["max_streams"], summary[k]["events_per_s"]] for k in runs],
    )
    direct = ["none (gRPC straight to a neuron)", floor.streams, floor.events_per_s]
    rows.insert(0, [*direct, added_p99_ms(floor), floor.client_cpu, floor.errors])
    summary["direct_floor_p99_added_ms"] = added_p99_ms(floor)
    text = plots.markdown_table(header, rows) + "\n\n" + verdict
    print(text)
    if out is None:
        return
    written = [plots.write_markdown(out, "gateway", text)]
    written.append(
        plots.line_plot(
            out,
            "events_per_s",
            {k: [(x.streams, x.events_per_s) for x in v] for k, v in runs.items()},
            "concurrent streams",
            "SSE events/s",
            "SSE events/s against concurrency (sim neurons)",
        )
    )
    written.append(
        plots.line_plot(
            out,
            "added_itl_p99",
            {k: [(x.streams, added_p99_ms(x)) for x in v] for k, v in runs.items()},
            "concurrent streams",
            "p99 added inter-token latency (ms)",
            "Inter-token latency cortex adds (p99)",
        )
    )
    write_summary(out / "gateway.json", summary)
    for path in [*written, out / "gateway.json"]:
        print(f"wrote {path}")


def profile(base: str, proc: Proc, streams: int, seconds: float, out: Path) -> None:
    """py-spy on the cortex process while `streams` streams run; the top
    functions by own time and by inclusive time."""
    raw = out / f"profile-{streams}.txt"
    py_spy = str(Path(sys.executable).parent / "py-spy")  # installed in the venv
    command = [py_spy, "record", "--pid", str(proc.popen.pid), "--format", "raw"]
    command += ["--rate", "250", "--duration", str(int(seconds)), "--nonblocking", "-o", str(raw)]
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    level = asyncio.run(run_level(base, MODEL, streams, seconds + 1, MAX_TOKENS))
    spy.wait(timeout=60)
    added = added_p99_ms(level)
    print(f"  {streams} streams: {level.events_per_s:.0f} events/s, p99 added {added:.2f} ms")
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    lines = [f"py-spy, {total} samples; the top frames by own time:"]
    lines += [f"  {n / total:6.1%}  {f}" for f, n in own.most_common(25)]
    lines += ["by inclusive time:"]
    lines += [f"  {n / total:6.1%}  {f}" for f, n in inclusive.most_common(40)]
    text = "\n".join(lines)
    print(text)
    (out / f"profile-{streams}.md").write_text(text + "\n")
    print(f"wrote {raw} and {out / f'profile-{streams}.md'}")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="cortex workers to try")
    p.add_argument("--profile", type=int, metavar="STREAMS", help="profile cortex at this load")
    p.add_argument(
        "--token-stream",
        choices=["per-request", "batched"],
        default="per-request",
        help="cortex's [pool] token_stream (bench/token_stream.py compares their CPU per token)",
    )
    args = p.parse_args()
    levels, seconds = (SMOKE_LEVELS, SMOKE_LEVEL_S) if args.smoke else (LEVELS, LEVEL_S)
    out: Path | None = args.out
    if out is None and not args.smoke:
        out = RESULTS / "gateway_capacity"
    log_dir = (out or RESULTS / "gateway_capacity-smoke") / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    farm = FarmOptions(replicas=4, sim_ttft_s=0, sim_itl_s=ITL_S)
    with start_farm(farm, log_dir / "sim-farm.log") as replicas:
        if args.profile:
            with cortex(replicas.addresses, 1, log_dir, args.token_stream) as (base, proc):
                asyncio.run(run_level(base, MODEL, 4, 0.5, MAX_TOKENS))
                profile(base, proc, args.profile, 10 if not args.smoke else 1, out or log_dir)
            return
        floor = asyncio.run(
            run_direct(replicas.addresses[0], MODEL, levels[0], seconds, MAX_TOKENS)
        )
        print(
            f"  without cortex: {levels[0]} streams straight to a neuron, p99 gap "
            f"{added_p99_ms(floor):.2f} ms over the engine's {ITL_S * 1000:.0f} ms "
            "(the farm's and the machine's own share)",
            flush=True,
        )
        runs = {}
        for workers in args.workers:
            label = f"{workers} worker" + ("s" if workers > 1 else "")
            with cortex(replicas.addresses, workers, log_dir, args.token_stream) as (base, _):
                runs[label] = ramp(base, levels, seconds, label)
    report(runs, floor, out)


if __name__ == "__main__":
    main()
