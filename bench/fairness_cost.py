"""What fair queuing and the usage ledger cost on the hot path: the same
streamed chat workload through two cortex processes in front of the same
sim neuron, both with admission control (a replica cap above the load, so
nothing waits: every request is classified, estimated, charged and
settled), one with `fair_queuing = true` and the ledger on (every finished
request added to it, flushed to the state directory's SQLite) and one with
`fair_queuing = false` and no ledger, in alternating order (A B B A) within
one run, at concurrency 1 and 16 (bench/auth_cost.py's rounds). Target
(issue 26): under 0.5 ms added TTFT p50 and within 2 % tokens/s.

    make bench-fairness-cost
    python -m bench.fairness_cost --rounds 6
    python -m bench.fairness_cost --smoke
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psutil

from bench.auth_cost import Cortex, measure
from harness.bench_stack import logs_dir, output_path, parser
from harness.gateway import Sim, running_cortex, sim_neurons
from harness.plots import markdown_table, write_results
from harness.workload import MODEL

# auth_cost's modes: "off" is FIFO without a ledger, "on" fair queuing and
# the ledger.
FLAGS = {
    "off": ["--no-admission-fair-queuing", "--no-tenancy-ledger"],
    "on": ["--admission-fair-queuing", "--tenancy-ledger"],
}


@contextmanager
def two_cortexes(logs: Path) -> Iterator[dict[str, Cortex]]:
    logs.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        (sim,) = stack.enter_context(sim_neurons(logs, "fairness_cost", [Sim(MODEL)]))
        cortexes: dict[str, Cortex] = {}
        state = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fairness-cost-")))
        for mode, flags in FLAGS.items():
            args = ["--replica-max-concurrency", "256", *flags]
            args += ["--state-dir", str(state / mode)]
            log = logs / f"fairness_cost-cortex-{mode}.log"
            running = stack.enter_context(running_cortex(log, [sim.address], *args, timeout_s=120))
            cortexes[mode] = Cortex(running.base_url, psutil.Process(running.proc.popen.pid))
        yield cortexes


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=4, help="A/B rounds per concurrency")
    cli.add_argument("--requests-per-client", type=int, default=8)
    cli.add_argument("--max-tokens", type=int, default=32)
    cli.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    args = cli.parse_args(argv)
    if args.smoke:
        args.rounds, args.requests_per_client, args.max_tokens = 1, 2, 4
        args.concurrency = [1, 2]
    out = output_path(args, "fairness_cost.json")
    with two_cortexes(logs_dir(out, "fairness_cost-logs")) as cortexes:
        summary, _ = measure(
            cortexes, "", args.concurrency, args.rounds, args.requests_per_client, args.max_tokens
        )
    rows = []
    for c in args.concurrency:
        cost = summary[f"c{c}_cost"]
        rows.append(
            [
                c,
                summary[f"c{c}_off"]["ttft_p50_ms"],
                summary[f"c{c}_on"]["ttft_p50_ms"],
                cost["ttft_added_ms"],
                cost["ttft_added_paired_ms"],
                cost["tokens_per_s_ratio"],
                cost["cortex_cpu_added_us"],
            ]
        )
    header = [
        "concurrency",
        "FIFO, no ledger: TTFT p50 (ms)",
        "fair + ledger: TTFT p50 (ms)",
        "added (ms)",
        "added, paired (ms)",
        "tokens/s on / off",
        "cortex CPU added (µs/request)",
    ]
    text = markdown_table(header, rows)
    print()
    print(text)
    write_results(out, "fairness_cost", text, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
