"""What request metrics cost on the hot path: the same streamed chat workload
through two cortex processes in front of the same neuron, one recording
metrics (the default) and one started with --no-metrics, in alternating order
within one run.

    make bench-metrics
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from bench.workload import Run, run
from tests.procs import Proc, free_port, start_up, wait_http_ready

MODEL = "smollm2-135m-instruct"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path("bench/results/metrics_cost.json"))
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    up = start_up(args.out.parent / "up-metrics.log")
    port = free_port()
    bare = Proc(
        [
            "cortex",
            "--port",
            str(port),
            "--neuron",
            up.neuron_address,
            "--model",
            MODEL,
            "--no-metrics",
        ],
        args.out.parent / "cortex-no-metrics.log",
    )
    bases = {"metrics": up.base_url, "no-metrics": f"http://127.0.0.1:{port}"}
    runs: dict[str, list[Run]] = {name: [] for name in bases}
    try:
        print("starting neuraxis up and a cortex without metrics ...", flush=True)
        wait_http_ready(up.proc, f"{up.base_url}/readyz", 900)
        wait_http_ready(bare, f"{bases['no-metrics']}/readyz", 120)
        for base in bases.values():  # warm-up
            asyncio.run(run("cortex", 2, 2, 8, base, up.neuron_address))
        requests = 2 * args.concurrency
        for r in range(args.rounds):
            order = list(bases) if r % 2 == 0 else list(bases)[::-1]
            for name in order + order[::-1]:
                result = asyncio.run(
                    run(
                        "cortex",
                        args.concurrency,
                        requests,
                        args.max_tokens,
                        bases[name],
                        up.neuron_address,
                    )
                )
                runs[name].append(result)
                print(
                    f"  {name:<10} ttft p50 {statistics.median(result.ttfts) * 1000:7.1f} ms  "
                    f"{result.tokens_per_s:6.1f} tok/s",
                    flush=True,
                )
    finally:
        bare.stop()
        up.proc.stop()
    summary = {
        name: {
            "ttft_p50_ms": statistics.median(statistics.median(x.ttfts) for x in rs) * 1000,
            "tokens_per_s": statistics.median(x.tokens_per_s for x in rs),
        }
        for name, rs in runs.items()
    }
    print()
    print(f"| cortex (concurrency {args.concurrency}) | TTFT p50 (ms) | output tokens/s |")
    print("|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | {s['ttft_p50_ms']:.1f} | {s['tokens_per_s']:.1f} |")
    ratio = summary["metrics"]["tokens_per_s"] / summary["no-metrics"]["tokens_per_s"]
    print(f"\nwith metrics: {ratio * 100:.1f}% of the tokens/s without")
    args.out.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
