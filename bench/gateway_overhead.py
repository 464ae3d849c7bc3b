"""Gateway overhead: the same streamed chat requests against the same neuron,
(a) through cortex's HTTP API and (b) straight to the neuron's gRPC Generate.

Starts `neuraxis up` (a real vLLM CPU neuron with SmolLM2 and cortex) on free
ports, then for concurrency 1 and 16 runs the workload over both paths in
alternating order (A B B A ...), and prints the median TTFT and output tokens/s
of each path with cortex's ratio to direct gRPC. Greedy decoding (temperature 0)
with the same prompts makes both paths generate the same tokens.

    make bench                      # defaults
    python -m bench.gateway_overhead --rounds 4 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from bench.workload import Run, run
from tests.procs import start_up, wait_http_ready


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="A/B rounds per concurrency (each runs both paths twice)",
    )
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--out", type=Path, default=Path("bench/results/gateway_overhead.json"))
    args = parser.parse_args()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    log_path = args.out.parent / "up.log"
    up = start_up(log_path)
    proc, base, neuron = up.proc, up.base_url, up.neuron_address
    summary: dict[str, dict[str, float]] = {}
    try:
        print(f"starting neuraxis up (log: {log_path}) ...", flush=True)
        wait_http_ready(proc, f"{base}/readyz", 900)
        # Warm both paths (first-request costs are not what is measured).
        asyncio.run(run("cortex", 2, 2, 8, base, neuron))
        asyncio.run(run("grpc", 2, 2, 8, base, neuron))
        for c in args.concurrency:
            requests = 5 if c == 1 else 2 * c
            runs: dict[str, list[Run]] = {"cortex": [], "grpc": []}
            for r in range(args.rounds):
                order = ["cortex", "grpc"] if r % 2 == 0 else ["grpc", "cortex"]
                for path in order + order[::-1]:
                    result = asyncio.run(run(path, c, requests, args.max_tokens, base, neuron))
                    runs[path].append(result)
                    ttft_ms = statistics.median(result.ttfts) * 1000
                    print(
                        f"  c={c:<2} {path:<6} ttft p50 {ttft_ms:7.1f} ms  "
                        f"{result.tokens_per_s:6.1f} tok/s  "
                        f"({result.tokens} tokens, {result.wall_s:.1f} s)",
                        flush=True,
                    )
            for path, rs in runs.items():
                summary[f"c{c}_{path}"] = {
                    "ttft_p50_ms": statistics.median(statistics.median(x.ttfts) for x in rs) * 1000,
                    "tokens_per_s": statistics.median(x.tokens_per_s for x in rs),
                }
    finally:
        proc.stop()

    print()
    print("| concurrency | path | TTFT p50 (ms) | output tokens/s |")
    print("|---|---|---|---|")
    for c in args.concurrency:
        for path in ("grpc", "cortex"):
            s = summary[f"c{c}_{path}"]
            name = "direct gRPC" if path == "grpc" else "cortex HTTP"
            print(f"| {c} | {name} | {s['ttft_p50_ms']:.1f} | {s['tokens_per_s']:.1f} |")
    print()
    for c in args.concurrency:
        g, h = summary[f"c{c}_grpc"], summary[f"c{c}_cortex"]
        ratio = h["tokens_per_s"] / g["tokens_per_s"]
        added = h["ttft_p50_ms"] - g["ttft_p50_ms"]
        summary[f"c{c}_ratio"] = {"tokens_per_s_ratio": ratio, "ttft_added_ms": added}
        print(
            f"concurrency {c}: cortex keeps {ratio * 100:.1f}% of direct tokens/s "
            f"(target >= 97%), adds {added:+.1f} ms to median TTFT (target < 5 ms)"
        )
    args.out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
