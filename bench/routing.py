"""Routing policies on real vLLM: `make bench-routing`.

Starts `neuraxis up --replicas 2 --kv-cache-gib 1` (two SmolLM2 replicas on
the CPU, each with a 1 GiB KV cache: ~23k tokens at 46,080 bytes a token),
or uses a running stack (--base-url). For each routing policy it starts a
cortex of its own (`neuraxis cortex --routing <policy>`, static mode) in
front of the same two replicas, so the engines stay loaded and only the
policy changes; the policies take turns, in reverse order for the second
workload, so drift on a shared machine falls on all of them.

Workloads (routing_workload.py): `shared`, 16 groups each with its own
~2,200-token system prompt (35k tokens of prefixes: 1.5 caches, so they
fit in the two together, not in one; with 1,500 words, 24k tokens, they
overflowed one cache by 4 % and least_outstanding kept most of them), 2
users per group, 3 turns each that extend their
conversation, 16-token answers, 2 requests in flight (one a replica),
users interleaved; and `hot`, one group of 16 users (every request shares
one prefix), 8 in flight, so that one prefix has more requests than its home
should take.

Why `shared` runs 2 in flight, not 8 as it did: with a fixed number in
flight (a closed loop) on a saturated machine, the mean latency is the
number in flight over the throughput (Little's law), so TTFT could fall
only as much as tokens/s rose, and measured the queue behind other
requests' prefills (p50 8-15 s for 16 tokens out), not the routing. At one
request a replica the two cores keep up, and TTFT is the request's own
prefill: what a cache hit saves. `--concurrency N` runs both workloads at N.

The caches are not flushed between policies: each policy's prompts come from
its own seed, so none finds blocks another left behind, and each starts with
caches full of blocks it cannot use (the first one with empty caches, which
costs the same: a free block and an evicted one are taken alike).

Per policy and workload: TTFT p50/p90, output tokens/s, the engines'
prefix-cache hit rate (vllm:prefix_cache_hits / queries on each neuron's
metrics endpoint, before and after), each replica's share of requests and
the policy's kinds of decision (cortex's neuraxis_routing_policy_decisions).
A markdown table and plots (TTFT CDF per policy, per-replica share) go to
bench/results/routing/.

    make bench-routing
    python -m bench.routing --workloads shared --policies least_outstanding prefix_affinity
    python -m bench.routing --smoke --base-url http://127.0.0.1:8080   # seconds
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from cortex.routing.factory import PolicyName
from harness import plots
from harness.bench_stack import (
    ENGINE_START_TIMEOUT_S,
    RESULTS,
    output_path,
    parser,
    running_stack,
    write_summary,
)
from harness.gateway import running_cortex
from harness.routed import COLUMNS
from harness.routing_workload import MODEL, Shape, User, conversations, run_workload

SHAPES = {
    "shared": Shape(
        groups=16, users_per_group=2, turns=3, prefix_words=2200, max_tokens=16, concurrency=2
    ),
    "hot": Shape(
        groups=1, users_per_group=16, turns=3, prefix_words=2200, max_tokens=16, concurrency=8
    ),
}
SMOKE = Shape(groups=2, users_per_group=2, turns=2, prefix_words=40, max_tokens=4, concurrency=2)
UP_ARGS = ["--replicas", "2", "--kv-cache-gib", "1"]


@dataclass(frozen=True)
class Neuron:
    address: str  # gRPC, for cortex
    metrics: str  # host:port of its metrics endpoint


@dataclass
class Result:
    workload: str
    policy: str
    ttft_p50_ms: float
    ttft_p90_ms: float
    tokens_per_s: float
    prefix_hit_rate: float
    shares: dict[str, float]  # replica -> share of requests
    decisions: dict[str, int]  # kind of decision -> requests
    ttfts_ms: list[float]
    failed: int = 0  # requests whose stream ended with an error event
    errors: dict[str, int] = field(default_factory=dict)  # their codes, counted

    @property
    def max_share_ratio(self) -> float:
        """The busiest replica's share over the average share."""
        return max(self.shares.values()) * len(self.shares) if self.shares else 0.0


def chat_neurons(admin_url: str, replicas: int) -> list[Neuron]:
    """The chat model's replicas, as cortex's service discovery (on its
    admin listener) lists them, once there are `replicas` of them (cortex is
    ready with the first)."""
    deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
    while True:
        groups = httpx.get(f"{admin_url}/sd/neurons", timeout=10).json()
        found = [
            Neuron(g["labels"]["replica"], g["targets"][0])
            for g in groups
            if g["labels"]["model"] == MODEL
        ]
        if len(found) >= replicas or time.monotonic() > deadline:
            return found
        time.sleep(1)


def _samples(url: str) -> list[tuple[str, dict[str, str], float]]:
    text = httpx.get(url, timeout=10).text
    return [
        (s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
    ]


def prefix_cache(neurons: list[Neuron]) -> tuple[float, float]:
    """The engines' prefix-cache hits and queries so far (tokens), summed."""
    hits = queries = 0.0
    for neuron in neurons:
        for name, _, value in _samples(f"http://{neuron.metrics}/metrics"):
            if name == "vllm:prefix_cache_hits_total":
                hits += value
            elif name == "vllm:prefix_cache_queries_total":
                queries += value
    return hits, queries


def routed(admin_url: str) -> tuple[dict[str, int], dict[str, int]]:
    """Requests this cortex routed, by replica and by kind of decision."""
    by_replica: dict[str, int] = {}
    by_decision: dict[str, int] = {}
    for name, labels, value in _samples(f"{admin_url}/metrics"):
        if name != "neuraxis_routing_policy_decisions_total" or labels["model"] != MODEL:
            continue
        replica, decision = labels["replica"], labels["decision"]
        by_replica[replica] = by_replica.get(replica, 0) + int(value)
        by_decision[decision] = by_decision.get(decision, 0) + int(value)
    return by_replica, {k: v for k, v in by_decision.items() if v}


@contextmanager
def policy_cortex(policy: str, neurons: list[Neuron], logs: Path) -> Iterator[tuple[str, str]]:
    """A cortex of its own routing by `policy` to `neurons`; its URL and its
    admin listener's."""
    args = ["--routing", policy, "--model", MODEL]
    args += ["--state-dir", str(logs / f"state-{policy}"), "--log-level", "warning"]
    addresses = [neuron.address for neuron in neurons]
    with running_cortex(logs / f"cortex-{policy}.log", addresses, *args) as running:
        _wait_all_up(running.admin_url, len(neurons))
        yield running.base_url, running.admin_url


def _wait_all_up(admin: str, count: int, timeout_s: float = 60) -> None:
    """/readyz needs one ready neuron; a fair comparison needs all of them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        up = [v for n, _, v in _samples(f"{admin}/metrics") if n == "neuraxis_replica_up"]
        if sum(up) >= count:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the cortex with admin {admin} never saw its {count} neurons ready")


def measure(
    workload: str, policy: str, shape: Shape, users: list[User], neurons: list[Neuron], logs: Path
) -> Result:
    with policy_cortex(policy, neurons, logs) as (base, admin):
        # A first request per replica pays one-off costs; not what is measured.
        warm = warm_shape(len(neurons))
        asyncio.run(run_workload(base, conversations(warm, seed=-1), warm))
        replicas_before, decisions_before = routed(admin)
        hits0, queries0 = prefix_cache(neurons)
        samples, wall = asyncio.run(run_workload(base, users, shape))
        hits1, queries1 = prefix_cache(neurons)
        by_replica, by_decision = routed(admin)
    counts = {r: by_replica.get(r, 0) - replicas_before.get(r, 0) for r in by_replica}
    for n in neurons:
        counts.setdefault(n.address, 0)
    decisions = {k: v - decisions_before.get(k, 0) for k, v in by_decision.items()}
    total = sum(counts.values()) or 1
    ttfts = sorted(s.ttft_s * 1000 for s in samples if not s.failed) or [0.0]
    return Result(
        workload=workload,
        policy=policy,
        ttft_p50_ms=statistics.median(ttfts),
        ttft_p90_ms=_percentile(ttfts, 0.9),
        tokens_per_s=sum(s.output_tokens for s in samples) / wall,
        prefix_hit_rate=(hits1 - hits0) / (queries1 - queries0) if queries1 > queries0 else 0.0,
        shares={r: c / total for r, c in sorted(counts.items())},
        decisions={k: v for k, v in decisions.items() if v},
        ttfts_ms=ttfts,
        failed=sum(s.failed for s in samples),
        errors=dict(Counter(s.error for s in samples if s.failed)),
    )


def warm_shape(replicas: int) -> Shape:
    """Two short requests per replica, none sharing a measured prefix."""
    return Shape(
        groups=1,
        users_per_group=2 * replicas,
        turns=1,
        prefix_words=4,
        max_tokens=2,
        concurrency=replicas,
    )


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(results: list[Result], out: Path | None) -> str:
    """The table and the targets; with `out` (the JSON summary's path), the
    markdown and the plots beside it, named after it."""
    header = [
        *COLUMNS,
        "max share / average",
        "replica shares",
        "decisions",
        "failed",
    ]
    rows = [
        [
            r.workload,
            r.policy,
            r.ttft_p50_ms,
            r.ttft_p90_ms,
            r.tokens_per_s,
            r.prefix_hit_rate,
            r.max_share_ratio,
            " ".join(f"{s:.2f}" for s in r.shares.values()),
            " ".join(f"{k}:{v}" for k, v in sorted(r.decisions.items())),
            " ".join([str(r.failed), *(f"{k}:{v}" for k, v in sorted(r.errors.items()))]),
        ]
        for r in results
    ]
    text = plots.markdown_table(header, rows) + "\n\n" + "\n".join(targets(results))
    if out is not None:
        out_dir, name = out.parent, out.stem
        where = [plots.write_markdown(out_dir, name, text)]
        for workload in sorted({r.workload for r in results}):
            mine = [r for r in results if r.workload == workload]
            where.append(
                plots.cdf_plot(
                    out_dir,
                    f"{name}-ttft-cdf-{workload}",
                    {r.policy: r.ttfts_ms for r in mine},
                    "time to first token (ms)",
                    f"TTFT per routing policy ({workload} workload)",
                )
            )
            where.append(
                plots.bar_plot(
                    out_dir,
                    f"{name}-replica-share-{workload}",
                    {r.policy: r.shares for r in mine},
                    "share of requests",
                    f"Each replica's share of requests ({workload} workload)",
                )
            )
        text += "\n\nwritten: " + ", ".join(str(p) for p in where)
    return text


def targets(results: list[Result]) -> list[str]:
    """The issue's targets, each with what was measured."""
    by = {(r.workload, r.policy): r for r in results}
    lines = []
    lo, pa = by.get(("shared", "least_outstanding")), by.get(("shared", "prefix_affinity"))
    if lo and pa:
        lines.append(
            f"shared: prefix_affinity TTFT p50 {lo.ttft_p50_ms / pa.ttft_p50_ms:.2f}x lower than "
            f"least_outstanding (target >= 2x); tokens/s {pa.tokens_per_s / lo.tokens_per_s:.2f}x "
            f"(target >= 1x); busiest replica {pa.max_share_ratio:.2f}x the average share "
            "(target <= 1.25x)"
        )
    lo, pa = by.get(("hot", "least_outstanding")), by.get(("hot", "prefix_affinity"))
    if lo and pa:
        lines.append(
            f"hot: prefix_affinity TTFT p90 {pa.ttft_p90_ms / lo.ttft_p90_ms:.2f}x "
            "least_outstanding's (target <= 1.10x)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--policies", nargs="+", default=[p.value for p in PolicyName])
    cli.add_argument("--workloads", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    cli.add_argument("--replicas", type=int, default=2, help="chat replicas to wait for (smoke: 1)")
    cli.add_argument("--concurrency", type=int, help="requests in flight, for every workload")
    args = cli.parse_args(argv)
    if args.smoke:
        # Every workload runs the SMOKE shape in a smoke run: one of them, and
        # the two policies the report compares, is the whole code path.
        args.replicas, args.workloads = 1, ["hot"]
        args.policies = [PolicyName.LEAST_OUTSTANDING.value, PolicyName.PREFIX_AFFINITY.value]
    out = output_path(args, "routing/routing.json")
    logs = Path(tempfile.mkdtemp(prefix="bench-routing-"))
    results: list[Result] = []
    with running_stack(args, RESULTS / "routing-up.log", UP_ARGS) as target:
        neurons = chat_neurons(target.admin_url, args.replicas)
        print(f"{len(neurons)} chat replicas: {', '.join(n.address for n in neurons)}")
        for w, workload in enumerate(args.workloads):
            shape = SMOKE if args.smoke else SHAPES[workload]
            if args.concurrency:
                shape = replace(shape, concurrency=args.concurrency)
            order = args.policies if w % 2 == 0 else args.policies[::-1]
            for p, policy in enumerate(order):
                users = conversations(shape, seed=1000 * w + p)
                result = measure(workload, policy, shape, users, neurons, logs)
                print(
                    f"  {workload:<6} {policy:<18} TTFT p50 {result.ttft_p50_ms:8.1f} ms  "
                    f"p90 {result.ttft_p90_ms:8.1f} ms  {result.tokens_per_s:6.1f} tok/s  "
                    f"hit rate {result.prefix_hit_rate:.2f}",
                    flush=True,
                )
                results.append(result)
    print()
    print(report(results, out))
    write_summary(out, {"results": [asdict(r) for r in results], "logs": str(logs)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
