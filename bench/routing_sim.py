"""`make bench-routing-sim`: the routing policies at scale, on simulated
replicas with a modelled prefix cache.

16 sim replicas (harness/sim_farm.py: one process, one grpc.aio server per
replica, each engine with its own LRU prefix cache and prefill lane), one
cortex process per policy in front of all of them (started together, so the
policies alternate within one run on the same replicas), and two workloads
(harness/sessions.py): many groups, each with a ~1,000-token system prompt
and users sending 3 turns, interleaved; and one hot group. Each run tags its
prompts afresh, so it starts with caches holding nothing it can use.

Reported per workload and policy: TTFT p50/p90, output tokens/s, the
prefix-cache hit rate (cached / prompt tokens, counted by the client from
each response's usage: the sim engine does not export vLLM's Prometheus
counters) and each replica's share of requests (cortex's
neuraxis_routing_decisions_total). `--sweep` runs prefix_affinity over
epsilon and the prefix block size instead.

Writes bench/results/routing_sim/ (or --out): summary.json, <name>.md,
ttft_cdf_<workload>.png, share_<workload>.png.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import gateway, plots
from harness.bench_stack import RESULTS, parser, write_summary
from harness.routed import COLUMNS, routed
from harness.sessions import Cell, Result, Shape, run
from harness.sim_farm import FarmOptions, start_farm

MODEL = "sim-model"
POLICIES = ("least_outstanding", "power_of_two", "prefix_affinity")
# The cache holds 512 blocks of 16 tokens (8 of the 64 groups' prompts): the
# prefixes fit in the 16 caches together, not in one. A miss costs 0.3 ms a
# token of prefill (~300 ms for a system prompt), decoding 30 ms a token:
# slow enough that the timer slips of a busy 2-core machine (tens of ms)
# do not drown the difference between a hit and a miss.
FARM = FarmOptions(
    replicas=16,
    sim_ttft_s=0.005,
    sim_itl_s=0.03,
    sim_prefix_cache_blocks=512,
    sim_block_tokens=16,
    sim_prefill_s_per_token=0.0003,
)
WORKLOADS = {
    "groups": Shape(groups=64, users_per_group=4, concurrency=32),
    "hot": Shape(groups=1, users_per_group=256, concurrency=32),
}
SMOKE_FARM = FarmOptions(replicas=4, sim_ttft_s=0, sim_itl_s=0.001, sim_prefix_cache_blocks=64)
SMOKE_WORKLOADS = {
    "groups": Shape(groups=3, users_per_group=2, system_chars=400, concurrency=4),
    "hot": Shape(groups=1, users_per_group=4, system_chars=400, concurrency=4),
}


@dataclass(frozen=True)
class Config:
    """One cortex in front of the farm; None: cortex's default setting."""

    policy: str
    epsilon: float | None = None
    block_bytes: int | None = None

    @property
    def name(self) -> str:
        tuned = [f"eps={self.epsilon}"] if self.epsilon is not None else []
        tuned += [f"block={self.block_bytes}"] if self.block_bytes is not None else []
        return " ".join([self.policy, *tuned])

    def args(self) -> list[str]:
        args = ["--routing", self.policy]
        if self.epsilon is not None:
            args += ["--routing-epsilon", str(self.epsilon)]
        if self.block_bytes is not None:
            args += ["--routing-block-bytes", str(self.block_bytes)]
        return args


SWEEP = [Config("prefix_affinity", e, 256) for e in (0.25, 0.5, 1.0)] + [
    Config("prefix_affinity", 0.5, b) for b in (128, 1024)
]


@contextmanager
def cortex(config: Config, neurons: Sequence[str], log_dir: Path) -> Iterator[tuple[str, str]]:
    """A cortex routing as `config` says; its URL and its admin listener's."""
    log = log_dir / f"cortex-{config.name.replace(' ', '_')}.log"
    ready = f"/v1/models/{MODEL}"
    with gateway.running_cortex(log, neurons, *config.args(), ready=ready) as running:
        yield running.base_url, running.admin_url


def measure(
    configs: Sequence[Config],
    workloads: dict[str, Shape],
    rounds: int,
    farm: FarmOptions,
    log_dir: Path,
) -> tuple[dict[tuple[str, str], Cell], list[str]]:
    cells: dict[tuple[str, str], Cell] = {}
    with start_farm(farm, log_dir / "sim-farm.log") as replicas, ExitStack() as stack:
        bases = {
            c.name: stack.enter_context(cortex(c, replicas.addresses, log_dir)) for c in configs
        }
        for r in range(rounds):
            # Alternate the order (A B C, then C B A) so drift falls on all alike.
            order = list(configs) if r % 2 == 0 else list(configs)[::-1]
            for workload, shape in workloads.items():
                for config in order:
                    base, admin = bases[config.name]
                    before = routed(admin)
                    tag = f"{workload} {config.name} round {r}"
                    result = asyncio.run(run(base, MODEL, shape, tag, seed=r))
                    after = routed(admin)
                    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
                    cell = cells.setdefault((workload, config.name), Cell(Result(), {}))
                    cell.add(result, delta)
                    print(
                        f"  {workload:<6} {config.name:<40} round {r}: ttft p50 "
                        f"{result.ttft_ms(0.5):7.1f} ms  hit {result.hit_rate:5.1%}  "
                        f"{result.tokens_per_s:6.1f} tok/s",
                        flush=True,
                    )
    return cells, replicas.addresses


def table(cells: dict[tuple[str, str], Cell], replicas: Sequence[str]) -> str:
    header = [
        *COLUMNS,
        "max replica share (x avg)",
        "min replica share (x avg)",
    ]
    rows: list[list[object]] = []
    for (workload, name), cell in cells.items():
        shares = cell.shares(replicas)
        rows.append(
            [
                workload,
                name,
                cell.result.ttft_ms(0.5),
                cell.result.ttft_ms(0.9),
                cell.result.tokens_per_s,
                f"{cell.result.hit_rate:.1%}",
                max(shares),
                min(shares),
            ]
        )
    return plots.markdown_table(header, rows)


def write(
    out: Path, name: str, cells: dict[tuple[str, str], Cell], replicas: Sequence[str], text: str
) -> list[Path]:
    written = [plots.write_markdown(out, name, text)]
    summary: dict[str, Any] = {}
    for workload in sorted({w for w, _ in cells}):
        mine = {n: c for (w, n), c in cells.items() if w == workload}
        cdf = {n: [t * 1000 for t in c.result.ttfts] for n, c in mine.items()}
        written.append(
            plots.cdf_plot(
                out, f"{name}_ttft_cdf_{workload}", cdf, "TTFT (ms)", f"TTFT, {workload} workload"
            )
        )
        # Replicas on the axis, one bar per policy: 16 legend entries would
        # cover the bars.
        share = {
            f"r{i:02d}": {n: c.shares(replicas)[i] for n, c in mine.items()}
            for i in range(len(replicas))
        }
        written.append(
            plots.bar_plot(
                out,
                f"{name}_share_{workload}",
                share,
                "share of requests (x average)",
                f"per-replica share, {workload} workload",
            )
        )
        for n, c in mine.items():
            summary[f"{workload}/{n}"] = {
                "ttft_p50_ms": c.result.ttft_ms(0.5),
                "ttft_p90_ms": c.result.ttft_ms(0.9),
                "tokens_per_s": c.result.tokens_per_s,
                "hit_rate": c.result.hit_rate,
                "shares": c.shares(replicas),
                "requests": len(c.result.ttfts),
            }
    path = out / f"{name}.json"
    write_summary(path, summary)
    return [*written, path]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=2, help="runs of each policy per workload")
    p.add_argument(
        "--sweep", action="store_true", help="prefix_affinity over epsilon and block size"
    )
    p.add_argument(
        "--also-epsilon",
        type=float,
        nargs="*",
        default=[],
        help="add prefix_affinity with these epsilons to the comparison",
    )
    args = p.parse_args()
    farm, workloads = (SMOKE_FARM, SMOKE_WORKLOADS) if args.smoke else (FARM, WORKLOADS)
    configs = SWEEP if args.sweep else [Config(policy) for policy in POLICIES]
    configs += [Config("prefix_affinity", e) for e in args.also_epsilon]
    rounds = 1 if args.smoke else args.rounds
    name = "sweep" if args.sweep else "routing_sim"
    out: Path | None = (
        args.out if args.out is not None else None if args.smoke else RESULTS / "routing_sim"
    )
    log_dir = (out or Path("bench/results/routing_sim-smoke")) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    shapes = ", ".join(f"{w}: {s.requests} requests" for w, s in workloads.items())
    print(f"{farm.replicas} sim replicas, {len(configs)} cortex configs, {shapes}", flush=True)
    cells, replicas = measure(configs, workloads, rounds, farm, log_dir)
    text = table(cells, replicas)
    print(text)
    if out is not None:
        for path in write(out, name, cells, replicas, text):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
