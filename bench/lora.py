"""LoRA adapters: adapter-aware routing against adapter-blind routing, in one
run, on simulated replicas that hold few adapters and take time to load one.

Two sim neurons each hold `--max-adapters` adapters (vLLM's max_loras) of
`--adapters` in all, and loading one takes `--load-s` (the sim stands in for
vLLM's add_lora; a real replica's load is of the same order on the CPU).
Requests name the adapters with a skewed popularity (Zipf, exponent
`--skew`: the first adapter the most asked for) from `--concurrency` clients
at once. Each mode gets fresh neurons and a cortex of its own: adapter-aware
(`[routing] adapter_affinity = true`, the default) and adapter-blind
(false: an adapter's requests routed as its base model's, by prefix
affinity). For each: adapter loads per 100 requests (the neurons' own
counters), TTFT p50 and p99, output tokens/s.

    make bench-lora
    python -m bench.lora --requests 400 --concurrency 8 --load-s 0.5
    python -m bench.lora --smoke    # a few requests (make test)

Real vLLM replicas (issue 28's `make bench-lora` on SmolLM2 with PEFT
adapters) are not run here yet.
"""

from __future__ import annotations

import asyncio
import random
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.bench_stack import logs_dir, output_path, parser
from harness.gateway import Sim, running_cortex, sim_neurons
from harness.plots import markdown_table, write_results
from harness.procs import cortex_metric
from harness.ratios import ratio
from harness.streamed_chat import CHAT_PATH, StreamedChat, greedy_chat, read

BASE = "sim-lora-base"
MODES = {"adapter-aware": (), "adapter-blind": ("--no-routing-adapter-affinity",)}


@dataclass(frozen=True)
class Workload:
    requests: int
    concurrency: int
    adapters: int
    max_adapters: int
    load_s: float
    skew: float
    tokens: int
    itl_s: float

    def adapter_ids(self) -> list[str]:
        return [f"lora-{i}" for i in range(self.adapters)]

    def draws(self, seed: int) -> list[str]:
        """Each request's adapter: Zipf-weighted, the same sequence per seed."""
        ids = self.adapter_ids()
        weights = [1 / (rank + 1) ** self.skew for rank in range(len(ids))]
        return random.Random(seed).choices(ids, weights, k=self.requests)


def _neuron_flags(w: Workload) -> list[str]:
    flags = ["--sim-ttft-s", "0.02", "--sim-itl-s", str(w.itl_s)]
    flags += ["--max-adapters", str(w.max_adapters), "--sim-adapter-load-s", str(w.load_s)]
    for adapter in w.adapter_ids():
        flags += ["--adapters", f"{adapter}=/adapters/{adapter}"]
    return flags


async def _load(base_url: str, w: Workload, seed: int) -> tuple[list[StreamedChat], float]:
    """Every request of the workload, `w.concurrency` at a time; the answers
    and the seconds they took together."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for adapter in w.draws(seed):
        queue.put_nowait(adapter)
    seen: list[StreamedChat] = []
    url = base_url + CHAT_PATH

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            adapter = queue.get_nowait()
            body = greedy_chat(adapter, "hello there", w.tokens)
            body["stream_options"] = {"include_usage": True}
            seen.append(await read(http, url, body))

    loop = asyncio.get_running_loop()
    started = loop.time()
    async with httpx.AsyncClient(timeout=120) as http:
        await asyncio.gather(*(client(http) for _ in range(w.concurrency)))
    return seen, loop.time() - started


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def start_mode(stack: ExitStack, logs: Path, mode: str, w: Workload) -> tuple[str, list[str]]:
    """A mode's fresh neurons and cortex (stopped with `stack`): cortex's
    base URL and the neurons' metrics URLs."""
    sims = [Sim(BASE, _neuron_flags(w)) for _ in range(2)]
    neurons = stack.enter_context(sim_neurons(logs, f"lora-{mode}", sims))
    log = logs / f"lora-{mode}-cortex.log"
    cortex = stack.enter_context(
        running_cortex(log, [n.address for n in neurons], *MODES[mode], timeout_s=120)
    )
    return cortex.base_url, [f"http://127.0.0.1:{n.metrics_port}" for n in neurons]


def run_mode(base_url: str, neurons: list[str], w: Workload, seed: int) -> dict[str, float]:
    """The workload through one mode's cortex: its figures."""
    seen, seconds = asyncio.run(_load(base_url, w, seed))
    for chat in seen:
        chat.raise_if_cut()
    loads = sum(
        cortex_metric(url, "neuraxis_neuron_adapter_loads_total", adapter=a)
        for url in neurons
        for a in w.adapter_ids()
    )
    ttfts = [t for t in (c.ttft for c in seen) if t is not None]
    return {
        "requests": float(len(seen)),
        "loads": loads,
        "loads_per_100": ratio(100 * loads, len(seen)),
        "ttft_p50_ms": _quantile(ttfts, 0.5) * 1000,
        "ttft_p99_ms": _quantile(ttfts, 0.99) * 1000,
        "tokens_per_s": ratio(sum(c.completion_tokens for c in seen), seconds),
    }


def report(summary: dict[str, dict[str, float]], w: Workload) -> str:
    header = ["routing", "requests", "adapter loads / 100 req", "TTFT p50 (ms)", "TTFT p99 (ms)"]
    header.append("output tokens/s")
    rows: list[list[object]] = [
        [
            mode,
            int(s["requests"]),
            s["loads_per_100"],
            s["ttft_p50_ms"],
            s["ttft_p99_ms"],
            s["tokens_per_s"],
        ]
        for mode, s in summary.items()
    ]
    aware, blind = summary["adapter-aware"], summary["adapter-blind"]
    fewer = ratio(blind["loads_per_100"], aware["loads_per_100"])
    return "\n".join(
        [
            f"Two sim replicas holding {w.max_adapters} adapters each, {w.adapters} adapters "
            f"(Zipf {w.skew:g}), a load {w.load_s:g} s; {w.requests} requests, "
            f"{w.concurrency} at a time, {w.tokens} tokens each.",
            "",
            markdown_table(header, rows),
            "",
            f"Adapter-aware routing loaded adapters {fewer:.1f}x less often.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--requests", type=int, default=400)
    cli.add_argument("--concurrency", type=int, default=8)
    cli.add_argument("--adapters", type=int, default=8)
    cli.add_argument("--max-adapters", type=int, default=2, help="per replica")
    cli.add_argument("--load-s", type=float, default=0.5, help="an adapter's load time")
    cli.add_argument("--skew", type=float, default=1.2, help="Zipf exponent of popularity")
    args = cli.parse_args(argv)
    if args.smoke:
        args.requests, args.load_s = 24, 0.05
    w = Workload(
        requests=args.requests,
        concurrency=args.concurrency,
        adapters=args.adapters,
        max_adapters=args.max_adapters,
        load_s=args.load_s,
        skew=args.skew,
        tokens=8,
        itl_s=0.005,
    )
    out = output_path(args, "lora.json")
    logs = logs_dir(out, "lora-logs")
    logs.mkdir(parents=True, exist_ok=True)
    summary = {}
    with ExitStack() as stack:
        # Both modes' processes start together (half the wait), then run in turn.
        started = {mode: start_mode(stack, logs, mode, w) for mode in MODES}
        for mode, (base_url, neurons) in started.items():
            summary[mode] = run_mode(base_url, neurons, w, seed=7)  # the same draws
            print(f"  {mode}: {summary[mode]}", flush=True)
    text = report(summary, w)
    print()
    print(text)
    write_results(out, "lora", text, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
