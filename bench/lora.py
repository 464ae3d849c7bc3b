"""LoRA adapters: adapter-aware routing against adapter-blind routing, in one
run, on two replicas that hold few adapters each and take time to load one;
and what serving a resident adapter costs against the base model.

Two replicas each hold `--max-adapters` adapters (vLLM's max_loras) of
`--adapters` in all. Requests name the adapters with a skewed popularity
(Zipf, exponent `--skew`: the first adapter the most asked for; at the
default 2.0 over 8 adapters their shares are 65 %, 16 %, 7.3 %, 4.1 %,
2.6 %, 1.8 %, 1.3 % and 1.0 %), each with a prompt of its own, from
`--concurrency` clients at once. Both modes get the same draws and a cortex
each: adapter-aware (`[routing] adapter_affinity = true`, the default) and
adapter-blind (false: an adapter's requests routed as its base model's, by
prefix affinity, which spreads distinct prompts evenly). For each: adapter
loads per 100 requests (the neurons' own counters), TTFT p50 and p99,
output tokens/s.

Real mode (the default, `make bench-lora`): two `neuraxis neuron serve`
SmolLM2 (smollm2-135m-instruct, vLLM on the CPU) with `--max-adapters 2
--max-lora-rank 16`, serving 8 adapters made here with peft
(harness/lora_adapters.py: rank 8 on q_proj and v_proj, non-zero weights;
kept under bench/results/lora-adapters/). The two modes take turns in front
of the same two neurons, each with a cortex of its own (the engines stay
loaded; loads are counted as the counters' growth during the mode). Then
the overhead: `--overhead-pairs` requests one at a time through the aware
cortex, the base model's and a resident adapter's in turn, the same
prompt and length: TTFT and per-request tokens/s, medians.

`--sim`: simulated neurons instead (fresh ones per mode), an adapter's load
taking `--load-s` (the sim stands in for vLLM's add_lora).

Why two requests in flight by default (one a replica): with more, requests
for several adapters run at once on a replica and pin them (an adapter in
use is never evicted), and a load waits for one to end, so the engine's
victim is whatever is idle at that moment, often the popular adapter
cortex meant to keep (docs/deploy.md has the figures at 4 and 8).

    make bench-lora
    python -m bench.lora --requests 200 --concurrency 2
    python -m bench.lora --sim --requests 400 --load-s 0.5
    python -m bench.lora --smoke    # sim, a few requests (make test)
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx

from axon.neuron_settings import DEFAULT_CHAT_MODEL
from axon.v1 import neuron_pb2 as pb
from harness.bench_stack import ENGINE_START_TIMEOUT_S, RESULTS, logs_dir, output_path, parser
from harness.gateway import Sim, running_cortex, sim_neurons
from harness.lora_adapters import make_adapters, prepared_model
from harness.plots import markdown_table, write_results
from harness.ports import free_port
from harness.procs import Proc, cortex_metric, log_tail, neuron_stub
from harness.ratios import ratio
from harness.streamed_chat import CHAT_PATH, StreamedChat, greedy_chat, read

SIM_BASE = "sim-lora-base"
MODES = {"adapter-aware": (), "adapter-blind": ("--no-routing-adapter-affinity",)}
LOADS = "neuraxis_neuron_adapter_loads_total"


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

    def top_share(self) -> float:
        """The most popular adapter's share of the requests."""
        weights = [float((rank + 1) ** -self.skew) for rank in range(self.adapters)]
        return weights[0] / sum(weights)


@dataclass(frozen=True)
class Neuron:
    address: str  # gRPC, as cortex's --neuron takes it
    metrics_url: str  # its Prometheus endpoint's base URL


def _sim_flags(w: Workload) -> list[str]:
    flags = ["--sim-ttft-s", "0.02", "--sim-itl-s", str(w.itl_s)]
    flags += ["--max-adapters", str(w.max_adapters), "--sim-adapter-load-s", str(w.load_s)]
    for adapter in w.adapter_ids():
        flags += ["--adapters", f"{adapter}=/adapters/{adapter}"]
    return flags


def sim_pair(stack: ExitStack, logs: Path, mode: str, w: Workload) -> list[Neuron]:
    """Two fresh sim neurons for a mode (stopped with `stack`), both ready."""
    sims = [Sim(SIM_BASE, _sim_flags(w)) for _ in range(2)]
    started = stack.enter_context(sim_neurons(logs, f"lora-{mode}", sims))
    neurons = [Neuron(n.address, f"http://127.0.0.1:{n.metrics_port}") for n in started]
    for neuron, sim in zip(neurons, started, strict=True):
        _wait_ready(neuron, sim.proc)
    return neurons


def real_pair(stack: ExitStack, logs: Path, w: Workload) -> list[Neuron]:
    """Two SmolLM2 neurons on vLLM serving the workload's adapters (made
    with peft, once), stopped with `stack`; not waited for (cortex is)."""
    adapters = make_adapters(prepared_model(), RESULTS / "lora-adapters", w.adapter_ids())
    started, procs = [], []
    for i in range(2):
        port, metrics_port = free_port(), free_port()
        args = ["neuron", "serve", "--port", str(port), "--metrics-port", str(metrics_port)]
        args += ["--max-adapters", str(w.max_adapters), "--max-lora-rank", "16"]
        for adapter, path in adapters.items():
            args += ["--adapters", f"{adapter}={path}"]
        proc = Proc(args, logs / f"lora-real-neuron{i}.log")
        stack.callback(proc.stop)
        started.append(Neuron(f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}"))
        procs.append(proc)
    for neuron, proc in zip(started, procs, strict=True):
        _wait_ready(neuron, proc)
    return started


def _wait_ready(neuron: Neuron, proc: Proc) -> None:
    """Until the neuron's Info says ready (its engine loaded): cortex's
    /readyz answers with one replica ready, and both modes need both (a
    sim neuron slow to start on a busy machine failed make test once)."""
    deadline = time.monotonic() + ENGINE_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"neuron exited:\n{log_tail(proc.log_path)}")
        try:
            with grpc.insecure_channel(neuron.address) as channel:
                if neuron_stub(channel).Info(pb.InfoRequest(), timeout=5).ready:
                    return
        except grpc.RpcError:
            pass
        time.sleep(1)  # polling an engine's start (30-100 s), not a test's wait
    raise RuntimeError(f"neuron {neuron.address} not ready:\n{log_tail(proc.log_path)}")


async def _load(base_url: str, w: Workload, seed: int) -> tuple[list[StreamedChat], float]:
    """Every request of the workload, `w.concurrency` at a time; the answers
    and the seconds they took together."""
    queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    for i, adapter in enumerate(w.draws(seed)):
        queue.put_nowait((i, adapter))
    seen: list[StreamedChat] = []
    url = base_url + CHAT_PATH

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            i, adapter = queue.get_nowait()
            # A prompt of its own: the same prompt for every request gave
            # adapter-blind routing one prefix, homed on one replica.
            body = greedy_chat(adapter, f"Request {i}: say hello.", w.tokens)
            body["stream_options"] = {"include_usage": True}
            seen.append(await read(http, url, body))

    loop = asyncio.get_running_loop()
    started = loop.time()
    async with httpx.AsyncClient(timeout=300) as http:
        await asyncio.gather(*(client(http) for _ in range(w.concurrency)))
    return seen, loop.time() - started


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _loads(neurons: list[Neuron], w: Workload) -> float:
    each = [
        cortex_metric(n.metrics_url, LOADS, adapter=a) for n in neurons for a in w.adapter_ids()
    ]
    return float(sum(each))


def run_mode(base_url: str, neurons: list[Neuron], w: Workload, seed: int) -> dict[str, float]:
    """The workload through one mode's cortex: its figures."""
    before = _loads(neurons, w)
    seen, seconds = asyncio.run(_load(base_url, w, seed))
    for chat in seen:
        chat.raise_if_cut()
    loads = _loads(neurons, w) - before
    ttfts = [t for t in (c.ttft for c in seen) if t is not None]
    return {
        "requests": float(len(seen)),
        "loads": loads,
        "loads_per_100": ratio(100 * loads, len(seen)),
        "ttft_p50_ms": _quantile(ttfts, 0.5) * 1000,
        "ttft_p99_ms": _quantile(ttfts, 0.99) * 1000,
        "tokens_per_s": ratio(sum(c.completion_tokens for c in seen), seconds),
    }


async def _overhead(
    base_url: str, base: str, adapter: str, pairs: int, tokens: int
) -> dict[str, float]:
    """`pairs` requests of the base model and of `adapter` (resident after
    its first), one at a time in turn, the same prompt and length (EOS
    ignored): each model's TTFT and tokens/s per request, medians."""
    seen: dict[str, list[StreamedChat]] = {base: [], adapter: []}
    url = base_url + CHAT_PATH
    async with httpx.AsyncClient(timeout=300) as http:
        for model in [adapter] + [base, adapter] * pairs:  # the first one loads it
            body = greedy_chat(model, "Tell me about the sea.", tokens)
            body.update(stream_options={"include_usage": True}, ignore_eos=True)
            chat = await read(http, url, body)
            chat.raise_if_cut()
            seen[model].append(chat)
    seen[adapter] = seen[adapter][1:]
    out: dict[str, float] = {}
    for name, model in (("base", base), ("adapter", adapter)):
        chats = seen[model]
        out[f"{name}_ttft_ms"] = statistics.median(c.ttft or 0.0 for c in chats) * 1000
        rates = [ratio(c.completion_tokens, c.ended_at - c.started_at) for c in chats]
        out[f"{name}_tokens_per_s"] = statistics.median(rates)
    return out


def report(summary: dict[str, dict[str, float]], w: Workload, real: bool) -> str:
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
        if mode in MODES
    ]
    aware, blind = summary["adapter-aware"], summary["adapter-blind"]
    fewer = ratio(blind["loads_per_100"], aware["loads_per_100"])
    what = "SmolLM2 replicas on vLLM (CPU)" if real else "sim replicas"
    load = "" if real else f", a load {w.load_s:g} s"
    lines = [
        f"Two {what} holding {w.max_adapters} adapters each, {w.adapters} adapters "
        f"(Zipf {w.skew:g}: the top one {100 * w.top_share():.0f} % of requests){load}; "
        f"{w.requests} requests, {w.concurrency} at a time, {w.tokens} tokens each.",
        "",
        markdown_table(header, rows),
        "",
        f"Adapter-aware routing loaded adapters {fewer:.1f}x less often.",
    ]
    over = summary.get("overhead")
    if over is not None:
        lines += [
            "",
            f"Overhead, one request at a time ({int(over['pairs'])} each, medians): "
            f"a resident adapter TTFT {over['adapter_ttft_ms']:.0f} ms and "
            f"{over['adapter_tokens_per_s']:.1f} tokens/s against the base model's "
            f"{over['base_ttft_ms']:.0f} ms and {over['base_tokens_per_s']:.1f} tokens/s.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--sim", action="store_true", help="simulated neurons instead of vLLM")
    cli.add_argument("--requests", type=int, default=None, help="default: 400 sim, 200 real")
    cli.add_argument("--concurrency", type=int, default=2)
    cli.add_argument("--adapters", type=int, default=8)
    cli.add_argument("--max-adapters", type=int, default=2, help="per replica")
    cli.add_argument("--load-s", type=float, default=0.5, help="sim: an adapter's load time")
    cli.add_argument("--skew", type=float, default=2.0, help="Zipf exponent of popularity")
    cli.add_argument("--tokens", type=int, default=None, help="default: 8 sim, 16 real")
    cli.add_argument("--overhead-pairs", type=int, default=20, help="real: requests of each")
    args = cli.parse_args(argv)
    real = not (args.sim or args.smoke)  # the smoke run stays simulated: seconds
    requests = args.requests or (200 if real else 400)
    load_s = args.load_s
    if args.smoke:
        requests, load_s = 24, 0.05
    w = Workload(
        requests=requests,
        concurrency=args.concurrency,
        adapters=args.adapters,
        max_adapters=args.max_adapters,
        load_s=load_s,
        skew=args.skew,
        tokens=args.tokens or (16 if real else 8),
        itl_s=0.005,
    )
    out = output_path(args, "lora.json")
    logs = logs_dir(out, "lora-logs")
    logs.mkdir(parents=True, exist_ok=True)
    summary: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        shared = real_pair(stack, logs, w) if real else None
        for mode, flags in MODES.items():
            neurons = shared or sim_pair(stack, logs, mode, w)
            log = logs / f"lora-{mode}-cortex.log"
            timeout = ENGINE_START_TIMEOUT_S if real else 120
            with running_cortex(log, [n.address for n in neurons], *flags, timeout_s=timeout) as c:
                summary[mode] = run_mode(c.base_url, neurons, w, seed=7)  # the same draws
                print(f"  {mode}: {summary[mode]}", flush=True)
                if real and mode == "adapter-aware":
                    top = w.adapter_ids()[0]
                    pairs = args.overhead_pairs
                    over = asyncio.run(_overhead(c.base_url, DEFAULT_CHAT_MODEL, top, pairs, 32))
                    summary["overhead"] = {**over, "pairs": float(pairs)}
                    print(f"  overhead: {summary['overhead']}", flush=True)
    text = report(summary, w, real)
    print()
    print(text)
    write_results(out, "lora", text, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
