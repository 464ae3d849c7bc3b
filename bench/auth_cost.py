"""What API keys and rate limits cost on the hot path: the same streamed chat
workload through two cortex processes in front of the same simulated neuron,
one with `auth = off` and one with `auth = required` and a key with all
three limits (rpm, tpm, max_concurrent: every request is looked up,
admitted in the SQLite store and settled), in alternating order (A B B A)
within one run, at concurrency 1 and 16.

The neuron is simulated (fixed time to first token and between tokens), so
the difference is cortex's own. Target (issue 12): under 0.5 ms added TTFT
p50 and within 2 % tokens/s.

    make bench-auth
    python -m bench.auth_cost --rounds 6 --requests-per-client 8
    python -m bench.auth_cost --smoke    # a few requests (make test)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from bench.auth_inprocess import measure as measure_in_process
from bench.auth_inprocess import report as inprocess_table
from harness.bench_stack import RESULTS, output_path, parser, write_summary
from harness.gateway import Sim, running_cortex, sim_neurons
from harness.keys import new_key
from harness.paired import paired_rounds
from harness.plots import bar_plot, markdown_table, write_markdown
from harness.workload import MODEL, PROMPTS, Run, timed, via_cortex

Summary = dict[str, dict[str, float]]
MODES = ("off", "on")


@dataclass(frozen=True)
class Cortex:
    base: str
    process: psutil.Process  # one worker: the server is this process

    def cpu_s(self) -> float:
        times = self.process.cpu_times()
        return float(times.user + times.system)


@contextmanager
def two_cortexes(logs: Path, counters: str = "auto") -> Iterator[tuple[dict[str, Cortex], str]]:
    """A sim neuron serving MODEL, a cortex with auth off and one with auth
    required (its rate-limit counters where `counters` says) in front of it;
    each by mode, and the key."""
    logs.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="neuraxis-bench-auth-"))
    with ExitStack() as stack:
        (sim,) = stack.enter_context(sim_neurons(logs, "auth", [Sim(MODEL)]))
        limits = ["--rpm", "1000000", "--tpm", "1000000000", "--max-concurrent", "1000"]
        key = new_key(state, "bench", *limits)
        cortexes: dict[str, Cortex] = {}
        for mode in MODES:
            args = ["--state-dir", str(state), "--auth", "required" if mode == "on" else "off"]
            args += ["--rate-limit-counters", counters]
            log = logs / f"auth-cortex-{mode}.log"
            running = stack.enter_context(running_cortex(log, [sim.address], *args, timeout_s=120))
            cortexes[mode] = Cortex(running.base_url, psutil.Process(running.proc.popen.pid))
        yield cortexes, key


async def _run(base: str, key: str | None, concurrency: int, requests: int, tokens: int) -> Run:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=600, limits=limits, headers=headers) as http:

        async def one(i: int) -> tuple[float, int]:
            return await via_cortex(http, base, PROMPTS[i % len(PROMPTS)], tokens)

        return await timed(requests, concurrency, one)


def measure(
    cortexes: dict[str, Cortex], key: str, concurrency: list[int], rounds: int, per_client: int,
    tokens: int,
) -> tuple[Summary, dict[str, list[float]]]:  # fmt: skip
    """Each concurrency's runs, A B B A per round. Besides the pooled TTFT
    p50, two figures less exposed to a shared machine's drift: the median of
    each round's paired difference (both modes run within seconds of each
    other), and cortex's own CPU time per request (psutil), which the
    client and the neuron do not share."""
    summary: Summary = {}
    ttfts: dict[str, list[float]] = {}
    for mode in MODES:  # warm-up: connections, the key's cache entry
        asyncio.run(_run(cortexes[mode].base, key if mode == "on" else None, 2, 4, 4))
    for c in concurrency:

        def one(mode: str, c: int = c) -> Run:
            key_or_none = key if mode == "on" else None
            return asyncio.run(_run(cortexes[mode].base, key_or_none, c, c * per_client, tokens))

        paired = paired_rounds(MODES, rounds, one, f"c={c:<3} auth", lambda m: cortexes[m].cpu_s())
        for mode in MODES:
            all_ttfts = paired.ttfts(mode)
            ttfts[f"c{c} auth {mode}"] = [t * 1000 for t in all_ttfts]
            summary[f"c{c}_{mode}"] = {
                "ttft_p50_ms": statistics.median(all_ttfts) * 1000,
                "tokens_per_s": statistics.median(run.tokens_per_s for run in paired.runs(mode)),
                "requests": float(len(all_ttfts)),
                "cortex_cpu_us_per_request": paired.cpu_s[mode] / len(all_ttfts) * 1e6,
            }
        off, on = summary[f"c{c}_off"], summary[f"c{c}_on"]
        summary[f"c{c}_cost"] = {
            "ttft_added_ms": on["ttft_p50_ms"] - off["ttft_p50_ms"],
            "ttft_added_paired_ms": paired.added_ttft_ms("on", "off"),
            "tokens_per_s_ratio": on["tokens_per_s"] / off["tokens_per_s"],
            "cortex_cpu_added_us": on["cortex_cpu_us_per_request"]
            - off["cortex_cpu_us_per_request"],
        }
    return summary, ttfts


def report(
    summary: Summary, concurrency: list[int], in_process: dict[str, float], out: Path | None
) -> None:
    rows: list[list[object]] = []
    for c in concurrency:
        for mode in MODES:
            s = summary[f"c{c}_{mode}"]
            rows.append(
                [
                    c,
                    mode,
                    s["ttft_p50_ms"],
                    s["tokens_per_s"],
                    s["cortex_cpu_us_per_request"],
                    int(s["requests"]),
                ]
            )
    headers = ["concurrency", "auth + limits", "TTFT p50 (ms)", "output tokens/s"]
    table = markdown_table([*headers, "cortex CPU per request (µs)", "requests"], rows)
    lines = [table, ""]
    for c in concurrency:
        cost = summary[f"c{c}_cost"]
        lines.append(
            f"concurrency {c}: auth + limits add {cost['ttft_added_ms']:+.2f} ms to TTFT p50 "
            f"(median of the rounds' paired differences {cost['ttft_added_paired_ms']:+.2f} ms; "
            f"target < 0.5 ms), {cost['cortex_cpu_added_us']:+.0f} µs of cortex CPU a request, "
            f"and keep {cost['tokens_per_s_ratio'] * 100:.1f}% of tokens/s (target >= 98%)"
        )
    lines += ["", "In cortex's process (bench/auth_inprocess.py):", "", inprocess_table(in_process)]
    text = "\n".join(lines)
    print()
    print(text)
    if out is not None:
        directory = out.parent
        write_markdown(directory, "auth_cost", text)
        bar_plot(
            directory,
            "auth_cost_ttft",
            {
                f"c={c}": {mode: summary[f"c{c}_{mode}"]["ttft_p50_ms"] for mode in MODES}
                for c in concurrency
            },
            "TTFT p50 (ms)",
            "TTFT p50, auth + limits off vs on (sim neuron)",
        )


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=4, help="A/B rounds per concurrency")
    cli.add_argument(
        "--requests-per-client", type=int, default=8, help="requests per run, per client"
    )
    cli.add_argument("--max-tokens", type=int, default=32)
    cli.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    cli.add_argument(
        "--counters",
        choices=["auto", "local", "shared"],
        default="auto",
        help="where the limited cortex keeps its rate-limit counters (shared: one SQLite "
        "transaction per admission and settlement, as with --workers N)",
    )
    args = cli.parse_args(argv)
    if args.smoke:
        args.rounds, args.requests_per_client, args.max_tokens = 1, 2, 4
        args.concurrency = [1, 2]
    # --base-url is not used: both cortexes and their neuron are started here.
    with two_cortexes(RESULTS / "auth_cost-logs", args.counters) as (cortexes, key):
        summary, _ = measure(
            cortexes, key, args.concurrency, args.rounds, args.requests_per_client, args.max_tokens
        )
    in_process = asyncio.run(measure_in_process(50 if args.smoke else 5000))
    out = output_path(args, "auth_cost.json")
    report(summary, args.concurrency, in_process, out)
    write_summary(out, {**summary, "in_process_us": in_process})
    return 0


if __name__ == "__main__":
    sys.exit(main())
