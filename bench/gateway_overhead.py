"""Gateway overhead: the same streamed chat requests against the same neuron,
(a) through cortex's HTTP API and (b) straight to the neuron's gRPC Generate.

Starts `neuraxis up` (a real vLLM CPU neuron with SmolLM2 and cortex) on free
ports, or measures a running one (--base-url), then for concurrency 1 and 16
runs the workload over both paths in alternating order (A B B A ...), and
prints the median TTFT and output tokens/s of each path with cortex's ratio
to direct gRPC. Greedy decoding (temperature 0) with the same prompts makes
both paths generate the same tokens.

    make bench                      # defaults
    python -m bench.gateway_overhead --rounds 4 --max-tokens 64
    python -m bench.gateway_overhead --smoke    # a few requests (make test)
"""

from __future__ import annotations

import sys

from harness.bench_stack import RESULTS, Target, output_path, parser, running_stack, write_summary
from harness.workload import Summary, compare


def measure(target: Target, concurrency: list[int], rounds: int, max_tokens: int) -> Summary:
    return compare(
        ("cortex", "grpc"), target.base_url, target.chat_neuron, concurrency, rounds, max_tokens
    )


def report(summary: Summary, concurrency: list[int]) -> None:
    print()
    print("| concurrency | path | TTFT p50 (ms) | output tokens/s |")
    print("|---|---|---|---|")
    for c in concurrency:
        for path in ("grpc", "cortex"):
            s = summary[f"c{c}_{path}"]
            name = "direct gRPC" if path == "grpc" else "cortex HTTP"
            print(f"| {c} | {name} | {s['ttft_p50_ms']:.1f} | {s['tokens_per_s']:.1f} |")
    print()
    for c in concurrency:
        g, h = summary[f"c{c}_grpc"], summary[f"c{c}_cortex"]
        ratio = h["tokens_per_s"] / g["tokens_per_s"]
        added = h["ttft_p50_ms"] - g["ttft_p50_ms"]
        summary[f"c{c}_ratio"] = {"tokens_per_s_ratio": ratio, "ttft_added_ms": added}
        print(
            f"concurrency {c}: cortex keeps {ratio * 100:.1f}% of direct tokens/s "
            f"(target >= 97%), adds {added:+.1f} ms to median TTFT (target < 5 ms)"
        )


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="A/B rounds per concurrency (each runs both paths twice)",
    )
    cli.add_argument("--max-tokens", type=int, default=32)
    cli.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = cli.parse_args(argv)
    if args.smoke:
        args.rounds, args.max_tokens, args.concurrency = 1, 4, [1, 2]
    with running_stack(args, RESULTS / "up.log") as target:
        summary = measure(target, args.concurrency, args.rounds, args.max_tokens)
    report(summary, args.concurrency)
    write_summary(output_path(args, "gateway_overhead.json"), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
