"""neuraxis against vLLM's own server: the embedded default (`neuraxis up`)
and `python -m vllm.entrypoints.openai.api_server` from the same venv, on the
same prepared model with the same engine settings.

The settings are the neuron's: what `neuraxis neuron serve --print-engine-args`
prints, resolved by vLLM itself (harness/vllm_config.py), passed to vLLM's
server flag by flag and resolved again on its side; both are printed and the
run stops if they differ. Both servers start, both are warmed up, then they
are measured alternately, never at once (A B A B, per concurrency): streamed
chat with greedy decoding and the same prompts; the idle side stays idle.
Per side and concurrency: TTFT p50/p99, inter-token p50/p99 (gaps between
content chunks), output tokens/s and the CPU seconds per output token of the
side's whole process tree (psutil), by process role.

`--runs N` repeats the measured run N times on the same two servers (started
once, with `--lock` held from their start to their stop: about 9 minutes for
the defaults) and reports the median over runs of each metric's ratio
(neuraxis / vLLM) or difference. `--profile` adds py-spy profiles of both
sides by stage (profile_stages.py) after the runs.

    make bench-vs-vllm                                   # 3 runs, c = 1, 16, 64
    python -m bench.vs_vllm --runs 1 --requests 8        # while iterating
    python -m bench.vs_vllm --smoke --base-url URL       # make test: seconds

The smoke run starts no vLLM server: it measures the given stack against
itself (side B is the same cortex), so it exercises the settings resolution
(both vLLM parsers, the flags), the streaming client, the CPU meter (on the
process listening at --base-url), the A/B loop, the table and the plots.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.profile_stages import profile
from harness import plots
from harness.bench_stack import (
    CHAT_MODEL,
    RESULTS,
    output_path,
    parser,
    running_stack,
    write_summary,
)
from harness.chat_stream import Batch, CpuMeter, run_batch
from harness.comparison import (
    METRICS,
    NEURAXIS,
    VLLM,
    compare,
    median_comparison,
    metrics,
)
from harness.heavy import held, listening_pid
from harness.vllm_config import COMPARED
from harness.vllm_server import matched_settings, running_vllm


@dataclass(frozen=True)
class Side:
    name: str
    base_url: str
    root_pid: int | None


@dataclass(frozen=True)
class Plan:
    concurrency: tuple[int, ...]
    requests_c1: int
    max_tokens: int
    extra: dict[str, Any]

    def requests(self, c: int) -> int:
        """Per side and concurrency, over its two batches: each batch at c=16
        runs two full waves (one is a few seconds: too noisy), at c=64 one."""
        if c == 1:
            return self.requests_c1
        return 4 * c if c <= 16 else 2 * c


# One run: per concurrency, per side, the batches it measured.
RunBatches = dict[int, dict[str, list[Batch]]]


def measure(sides: tuple[Side, Side], plan: Plan) -> RunBatches:
    meters = {s.name: CpuMeter(s.root_pid) for s in sides}
    for side in sides:  # first-request costs are not what is measured
        asyncio.run(run_batch(side.base_url, CHAT_MODEL, 2, 4, 8, plan.extra, meters[side.name]))
    batches: RunBatches = {}
    for c in plan.concurrency:
        batches[c] = {s.name: [] for s in sides}
        half = max(plan.requests(c) // 2, 1)
        # A B A B, not A B B A: each batch of either side follows one batch of
        # the other, so both have been idle alike. After A B B A, A's second
        # batch followed ~20 s of idle and its first request paid ~0.9 s in
        # the neuron (docs/performance.md), B's never did.
        for _ in range(2):
            for side in sides:
                batch = asyncio.run(
                    run_batch(
                        side.base_url,
                        CHAT_MODEL,
                        c,
                        half,
                        plan.max_tokens,
                        plan.extra,
                        meters[side.name],
                    )
                )
                batches[c][side.name].append(batch)
                print(
                    f"  c={c:<2} {side.name:<10} {batch.tokens / batch.wall_s:6.1f} tok/s "
                    f"({len(batch.streams)} requests, {batch.tokens} tokens, "
                    f"{batch.wall_s:.1f} s, CPU {sum(batch.cpu_s.values()):.1f} s)",
                    flush=True,
                )
    return batches


def report(runs: list[dict[str, Any]], plan: Plan, out_dir: Path | None) -> str:
    lines = [f"{len(runs)} run(s), {plan.max_tokens} output tokens a request", ""]
    rows: list[list[object]] = []
    for i, run in enumerate(runs, 1):
        for c in plan.concurrency:
            for side in (NEURAXIS, VLLM):
                m = run[str(c)][side]
                rows.append(
                    [i, c, side, f"{m['requests']} ({m['full_length']} full)"]
                    + [float(m[key]) for key, _, _ in METRICS]
                )
    header = ["run", "concurrency", "server", "requests"] + [label for _, label, _ in METRICS]
    lines += [plots.markdown_table(header, rows), ""]
    summary_rows: list[list[object]] = []
    for c in plan.concurrency:
        med = median_comparison(runs, c)
        summary_rows.append(
            [c]
            + [
                f"{med[key]:+.1f} ms" if how == "delta" else f"{med[key]:.3f}"
                for key, _, how in METRICS
            ]
        )
    lines.append(f"neuraxis against vLLM's server, median of {len(runs)} run(s):")
    lines.append("")
    lines.append(
        plots.markdown_table(["concurrency"] + [label for _, label, _ in METRICS], summary_rows)
    )
    lines += ["", *_frontend(runs, plan)]
    lines += ["", "CPU ms per output token by process role (last run):", ""]
    role_rows: list[list[object]] = []
    for c in plan.concurrency:
        for side in (NEURAXIS, VLLM):
            by_role = runs[-1][str(c)][side]["cpu_ms_per_token_by_role"]
            role_rows += [[c, side, name, float(ms)] for name, ms in sorted(by_role.items())]
    lines.append(plots.markdown_table(["concurrency", "server", "role", "CPU ms"], role_rows))
    text = "\n".join(lines)
    if out_dir is not None:
        plots.write_markdown(out_dir, "vs_vllm", text)
        _plot(runs, plan, out_dir)
    return text


# The engine's processes (vLLM's, the same on both sides); everything else is
# the frontend: cortex, the neuron and Ray against vLLM's API server.
ENGINE_ROLES = ("engine core", "model worker")
# `--token-stream`: the neuraxis side's cortex setting, through the environment
# `neuraxis up` hands its cortex.
TOKEN_STREAM_ENV = "NEURAXIS_CORTEX_POOL__TOKEN_STREAM"
# Issue 29's targets: frontend CPU a token against vLLM's API server's.
FRONTEND_TARGETS = {16: 1.5, 64: 1.0}


def frontend_ms(by_role: dict[str, float]) -> float:
    """CPU ms per output token of every process but the engine's."""
    return sum(ms for name, ms in by_role.items() if name not in ENGINE_ROLES)


def _frontend(runs: list[dict[str, Any]], plan: Plan) -> list[str]:
    """`make bench-frontend`'s table: per concurrency, the frontend's CPU a
    token on each side and their ratio, medians over the runs."""
    rows: list[list[object]] = []
    for c in plan.concurrency:
        sides = {
            side: [frontend_ms(r[str(c)][side]["cpu_ms_per_token_by_role"]) for r in runs]
            for side in (NEURAXIS, VLLM)
        }
        ratios = [a / b if b else float("nan") for a, b in zip(*sides.values(), strict=True)]
        target = FRONTEND_TARGETS.get(c)
        rows.append(
            [
                c,
                statistics.median(sides[NEURAXIS]),
                statistics.median(sides[VLLM]),
                f"{statistics.median(ratios):.2f}",
                " / ".join(f"{r:.2f}" for r in ratios),
                f"<= {target}" if target else "",
            ]
        )
    header = ["concurrency", "neuraxis (ms)", "vLLM API server (ms)", "ratio", "per run", "target"]
    title = f"Everything but the engine, CPU ms per output token, median of {len(runs)} run(s):"
    return [title, "", plots.markdown_table(header, rows)]


def _plot(runs: list[dict[str, Any]], plan: Plan, out_dir: Path) -> None:
    def median_of(c: int, side: str, key: str) -> float:
        return statistics.median(float(r[str(c)][side][key]) for r in runs)

    sides = (NEURAXIS, VLLM)
    plots.bar_plot(
        out_dir,
        "tokens_per_s",
        {f"c={c}": {s: median_of(c, s, "tokens_per_s") for s in sides} for c in plan.concurrency},
        "output tokens/s (median of runs)",
        "Streamed chat throughput",
    )
    for key, label in (("itl_p50_ms", "inter-token p50"), ("ttft_p50_ms", "TTFT p50")):
        plots.line_plot(
            out_dir,
            key,
            {s: [(c, median_of(c, s, key)) for c in plan.concurrency] for s in sides},
            "concurrency",
            f"{label} (ms, median of runs)",
            f"{label} against concurrency",
        )


def print_settings(ours: dict[str, Any], theirs: dict[str, Any], env: dict[str, str]) -> None:
    rows = [[k, str(ours[k]), str(theirs[k])] for k in COMPARED]
    rows += [[f"env {k}", v, v] for k, v in sorted(env.items()) if k.startswith("VLLM_CPU")]
    print(plots.markdown_table(["setting", "neuraxis neuron", "vllm serve"], rows), flush=True)
    differ = [k for k in COMPARED if ours[k] != theirs[k]]
    if differ:
        raise SystemExit(f"the two sides' engine settings differ: {differ}")


def run_all(
    args: argparse.Namespace, plan: Plan, flags: list[str], env: dict[str, str]
) -> list[dict[str, Any]]:
    """Start both servers (holding the lock until they stop), then `--runs`
    measured runs on them, then the optional profiles."""
    results = Path(args.logs)
    runs = []
    with held(args.lock), ExitStack() as stack:
        target = stack.enter_context(running_stack(args, results / "up.log"))
        ours = Side(NEURAXIS, target.base_url, target.root_pid or listening_pid(target.base_url))
        if args.no_vllm:
            theirs = Side(VLLM, ours.base_url, ours.root_pid)
        else:
            server = stack.enter_context(running_vllm(flags, env, results / "vllm-serve.log"))
            theirs = Side(VLLM, server.base_url, server.popen.pid)
        for i in range(args.runs):
            started = time.strftime("%H:%M:%S", time.gmtime())
            print(f"run {i + 1}/{args.runs} (started {started} UTC)", flush=True)
            runs.append(summarise(measure((ours, theirs), plan), plan))
        if args.profile:
            # After the measured runs, on the same servers: py-spy slows
            # what it samples, so no measured figure comes from these.
            for side in (ours, theirs):
                out = results / "profile" / side.name.replace(" ", "-")
                print(f"\nprofile of {side.name} at c=16:\n", flush=True)
                text = profile(side.root_pid or 0, side.base_url, out, 16, 64)
                plots.write_markdown(out, "stages", text)
                print(text, flush=True)
    return runs


def summarise(batches: RunBatches, plan: Plan) -> dict[str, Any]:
    run: dict[str, Any] = {}
    for c in plan.concurrency:
        a = metrics(batches[c][NEURAXIS], plan.max_tokens)
        b = metrics(batches[c][VLLM], plan.max_tokens)
        run[str(c)] = {NEURAXIS: a, VLLM: b, "compare": compare(a, b)}
    return run


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--runs", type=int, default=3, help="whole runs; the report is their median")
    cli.add_argument("--requests", type=int, default=12, help="requests per side at c=1")
    cli.add_argument("--max-tokens", type=int, default=64)
    cli.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    cli.add_argument(
        "--no-vllm", action="store_true", help="side B is the same neuraxis stack (smoke runs)"
    )
    cli.add_argument(
        "--ignore-eos",
        action="store_true",
        help="send ignore_eos: every answer max_tokens long (both servers must accept it)",
    )
    cli.add_argument(
        "--profile", action="store_true", help="py-spy both sides by stage after each run"
    )
    cli.add_argument(
        "--token-stream",
        choices=("per-request", "batched"),
        help="the neuraxis side's [pool] token_stream, for the stack this run starts "
        "(default: its config's)",
    )
    cli.add_argument("--lock", type=Path, help="a lock file to hold for each run (flock)")
    cli.add_argument("--logs", default=str(RESULTS / "vs_vllm"), help="where the servers log")
    args = cli.parse_args(argv)
    # A SIGTERM unwinds like Ctrl-C, so that both servers are stopped: they
    # run in sessions of their own and would outlive this process.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.token_stream:  # neuraxis up's cortex reads it from its environment
        os.environ[TOKEN_STREAM_ENV] = args.token_stream
    if args.smoke:
        args.runs, args.requests, args.max_tokens = 1, 2, 4
        args.concurrency, args.no_vllm = [1, 2], True
    plan = Plan(
        tuple(args.concurrency),
        args.requests,
        args.max_tokens,
        {"ignore_eos": True} if args.ignore_eos else {},
    )
    flags, env, ours, theirs = matched_settings()
    print_settings(ours, theirs, env)
    print("vllm serve " + " ".join(flags), flush=True)
    runs = run_all(args, plan, flags, env)
    summary_path = output_path(args, "vs_vllm/vs_vllm.json")
    out_dir = summary_path.parent if summary_path is not None else None
    print()
    print(report(runs, plan, out_dir))
    write_summary(summary_path, {"settings": {"neuraxis": ours, "vllm": theirs}, "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
