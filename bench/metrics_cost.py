"""What request metrics cost on the hot path: the same streamed chat workload
through two cortex processes in front of the same neuron, one recording
metrics (the default) and one started with --no-metrics, in alternating order
within one run.

    make bench-metrics
    python -m bench.metrics_cost --smoke    # a few requests (make test)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from harness.bench_stack import (
    CHAT_MODEL,
    RESULTS,
    Target,
    output_path,
    parser,
    running_stack,
    write_summary,
)
from harness.gateway import cortex
from harness.paired import paired_rounds
from harness.procs import Proc, wait_http_ready
from harness.workload import Run, run

Summary = dict[str, dict[str, float]]


def bare_cortex(neuron: str, log_path: Path) -> tuple[Proc, str]:
    """A cortex with --no-metrics in front of `neuron`; its base URL."""
    bare = cortex(log_path, [neuron], "--model", CHAT_MODEL, "--no-metrics")
    return bare.proc, bare.base_url


def measure(target: Target, rounds: int, concurrency: int, max_tokens: int) -> Summary:
    bare, bare_url = bare_cortex(target.chat_neuron, RESULTS / "cortex-no-metrics.log")
    bases = {"metrics": target.base_url, "no-metrics": bare_url}

    def one(name: str) -> Run:
        requests = 2 * concurrency
        return asyncio.run(
            run("cortex", concurrency, requests, max_tokens, bases[name], target.chat_neuron)
        )

    try:
        wait_http_ready(bare, f"{bare_url}/readyz", 120)
        for base in bases.values():  # warm-up
            asyncio.run(run("cortex", 2, 2, 8, base, target.chat_neuron))
        paired = paired_rounds(list(bases), rounds, one, "cortex")
    finally:
        bare.stop()
    return {name: paired.medians(name) for name in bases}


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("--concurrency", type=int, default=16)
    cli.add_argument("--max-tokens", type=int, default=32)
    args = cli.parse_args(argv)
    if args.smoke:
        args.rounds, args.concurrency, args.max_tokens = 1, 2, 4
    RESULTS.mkdir(parents=True, exist_ok=True)
    with running_stack(args, RESULTS / "up-metrics.log") as target:
        summary = measure(target, args.rounds, args.concurrency, args.max_tokens)
    print()
    print(f"| cortex (concurrency {args.concurrency}) | TTFT p50 (ms) | output tokens/s |")
    print("|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | {s['ttft_p50_ms']:.1f} | {s['tokens_per_s']:.1f} |")
    ratio = summary["metrics"]["tokens_per_s"] / summary["no-metrics"]["tokens_per_s"]
    print(f"\nwith metrics: {ratio * 100:.1f}% of the tokens/s without")
    write_summary(output_path(args, "metrics_cost.json"), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
