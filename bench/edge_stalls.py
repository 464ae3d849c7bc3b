"""Whether what a client sends stalls cortex's event loop (issue 31, points
1, 2 and 4): `/healthz` latency, probed every 20 ms from a process of its
own, while each attack runs against a cortex with `auth = required` in
front of a sim neuron, after an idle baseline in the same run.

- keyless: four 16 MiB bodies at once without a key (a 401 from the
  headers; nothing read or parsed);
- big_bodies: four 16 MiB bodies of small chat messages at once from a
  valid key (parsed and validated off the loop; the sim refuses them as
  longer than its context, after cortex has parsed them);
- big_answer: two non-streamed chat answers at the `max_output_entries`
  cap at once (n × max_tokens × (1 + top_logprobs); the sim engine gives
  log probabilities), built and encoded off the loop;
- unread_echo: four completions with `echo` at the `max_echo_bytes` cap
  whose clients never read (dropped after `send_timeout_s`).

The target is `/healthz` p99 under 50 ms during each. The table gives p50,
p99 and the worst probe, the probes taken, and the attack's requests by
status.

    make bench-edge
    python -m bench.edge_stalls --rounds 3
    python -m bench.edge_stalls --smoke    # small sizes, one round (make test)
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from harness.bench_stack import logs_dir, output_path, parser
from harness.comparison import percentile
from harness.gateway import sim_gateway
from harness.keys import new_key
from harness.plots import markdown_table, write_results

MODEL = "sim-edge"
PROBE_PAUSE_S = 0.02
TARGET_P99_MS = 50.0


@dataclass(frozen=True)
class Sizes:
    body_bytes: int  # each big body
    bodies: int  # sent at once
    answer_n: int  # the big answer: n × tokens × (1 + top_logprobs)
    answer_tokens: int
    answer_top: int
    answers: int
    echo_prompt_bytes: int  # × n = the echoed bytes of one answer
    echo_n: int
    readers: int  # clients that never read
    hold_s: float  # how long they hold on


FULL = Sizes(
    body_bytes=16 * 1024 * 1024 - 64 * 1024,
    bodies=4,
    answer_n=6,
    answer_tokens=4000,
    answer_top=20,
    answers=2,
    echo_prompt_bytes=1024 * 1024 - 1024,
    echo_n=16,
    readers=4,
    hold_s=35.0,  # past cortex's send_timeout_s (30 s)
)
SMOKE = Sizes(
    body_bytes=512 * 1024,
    bodies=1,
    answer_n=1,
    answer_tokens=200,
    answer_top=5,
    answers=1,
    echo_prompt_bytes=64 * 1024,
    echo_n=2,
    readers=1,
    hold_s=1.0,
)


@dataclass(frozen=True)
class Target:
    """The cortex under attack, a key of its own, and cortex's log."""

    base_url: str
    key: str
    cortex_log: Path

    def drops(self) -> int:
        """Connections cortex has dropped for not reading their answer."""
        return self.cortex_log.read_text(errors="replace").count("read none of its answer")


def _probe(url: str, conn: Connection) -> None:
    """(Its own process.) GET `url` every PROBE_PAUSE_S; at each "cut",
    send back the latencies (s) since the last one; end at "stop". A probe
    that fails counts as its time to fail."""
    latencies: list[float] = []
    with httpx.Client(timeout=30) as client:
        client.get(url)
        conn.send("ready")
        while True:
            if conn.poll():
                if conn.recv() == "stop":
                    return
                conn.send(latencies)
                latencies = []
            started = time.perf_counter()
            with suppress(httpx.HTTPError):
                client.get(url)
            latencies.append(time.perf_counter() - started)
            time.sleep(PROBE_PAUSE_S)


class Prober:
    """`/healthz` probed from a process of its own (the benchmark's own
    work would delay probes sent from this one)."""

    def __init__(self, base_url: str) -> None:
        self._conn, theirs = multiprocessing.get_context("spawn").Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_probe, args=(f"{base_url}/healthz", theirs), daemon=True
        )
        self._process.start()
        if self._conn.recv() != "ready":
            raise RuntimeError("the prober did not start")

    def cut(self) -> list[float]:
        """The latencies since the last cut."""
        self._conn.send("cut")
        samples: list[float] = self._conn.recv()
        return samples

    def stop(self) -> None:
        self._conn.send("stop")
        self._process.join(timeout=10)


def _messages_body(size: int) -> bytes:
    """A chat request of about `size` bytes of small messages."""
    one = {"role": "user", "content": "hello there, how are you today?"}
    count = size // (len(json.dumps(one)) + 2)
    return json.dumps({"model": MODEL, "max_tokens": 1, "messages": [one] * count}).encode()


async def _post_all(base: str, path: str, bodies: list[bytes], key: str | None) -> Counter[str]:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    async with httpx.AsyncClient(timeout=300) as http:

        async def one(body: bytes) -> str:
            try:
                response = await http.post(f"{base}{path}", content=body, headers=headers)
            except httpx.HTTPError as e:
                return type(e).__name__
            return str(response.status_code)

        return Counter(await asyncio.gather(*(one(b) for b in bodies)))


async def keyless(t: Target, s: Sizes) -> Counter[str]:
    body = _messages_body(s.body_bytes)
    return await _post_all(t.base_url, "/v1/chat/completions", [body] * s.bodies, None)


async def big_bodies(t: Target, s: Sizes) -> Counter[str]:
    body = _messages_body(s.body_bytes)
    return await _post_all(t.base_url, "/v1/chat/completions", [body] * s.bodies, t.key)


async def big_answer(t: Target, s: Sizes) -> Counter[str]:
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "count"}],
        "n": s.answer_n,
        "max_tokens": s.answer_tokens,
        "logprobs": True,
        "top_logprobs": s.answer_top,
    }
    body = json.dumps(request).encode()
    return await _post_all(t.base_url, "/v1/chat/completions", [body] * s.answers, t.key)


async def unread_echo(t: Target, s: Sizes) -> Counter[str]:
    """Clients that send a completions request with echo and never read;
    each holds on for `hold_s`, then says whether cortex had closed it."""
    prompt = "x" * s.echo_prompt_bytes  # one sim token: the answer is the echo
    request = {"model": MODEL, "prompt": prompt, "echo": True, "n": s.echo_n, "max_tokens": 1}
    body = json.dumps(request).encode()
    port = int(t.base_url.rsplit(":", 1)[1])
    head = (
        f"POST /v1/completions HTTP/1.1\r\nhost: cortex\r\nauthorization: Bearer {t.key}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"  # a whole answer ends the connection
    ).encode()

    def hold() -> str:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(head + body)
            time.sleep(s.hold_s)  # never reading: what such a client does
            return _read_to_end(sock)

    dropped = t.drops()
    results = Counter(await asyncio.gather(*(asyncio.to_thread(hold) for _ in range(s.readers))))
    results["dropped by cortex (its log)"] = t.drops() - dropped
    return results


def _read_to_end(sock: socket.socket) -> str:
    """Read what is left: the whole answer (cortex waited), or its start
    and then the end of the connection (cortex dropped it; the kernel still
    delivers what it had queued), or nothing more for a while (still open)."""
    sock.settimeout(5)
    start, received = b"", 0
    try:
        while chunk := sock.recv(1 << 20):
            start = start or chunk
            received += len(chunk)
    except TimeoutError:
        return "still open"
    except ConnectionResetError:
        return "dropped by cortex"
    head, _, _ = start.partition(b"\r\n\r\n")
    lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    whole = len(head) + 4 + int(lengths[0].split(b":")[1]) if lengths else None
    return "whole answer" if received == whole else "dropped by cortex"


async def idle(t: Target, s: Sizes) -> Counter[str]:
    await asyncio.sleep(s.hold_s / 10)
    return Counter()


Attack = Callable[[Target, Sizes], Coroutine[Any, Any, Counter[str]]]
ATTACKS: dict[str, Attack] = {
    "idle": idle,
    "keyless": keyless,
    "big_bodies": big_bodies,
    "big_answer": big_answer,
    "unread_echo": unread_echo,
}


def _ms(samples: list[float], q: float) -> float:
    """The q-quantile (0..1) of latencies in seconds, in milliseconds."""
    return percentile(samples, q * 100) * 1000


def report(summary: dict[str, dict[str, object]], rounds: int) -> str:
    header = ["attack", "/healthz p50 (ms)", "p99 (ms)", "max (ms)", "probes", "requests"]
    rows: list[list[object]] = []
    for name, s in summary.items():
        rows.append([name, s["p50_ms"], s["p99_ms"], s["max_ms"], s["probes"], s["outcomes"]])
    text = "\n".join(
        [
            f"`/healthz` every {PROBE_PAUSE_S * 1000:g} ms during each attack (medians of "
            f"{rounds} round(s) for the latencies); target p99 < {TARGET_P99_MS:g} ms.",
            "",
            markdown_table(header, rows),
        ]
    )
    print()
    print(text)
    return text


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--rounds", type=int, default=3, help="each attack this many times")
    cli.add_argument(
        "--attacks", nargs="+", choices=list(ATTACKS), default=list(ATTACKS), help="which ones"
    )
    args = cli.parse_args(argv)
    attacks = {name: ATTACKS[name] for name in args.attacks}
    sizes, rounds = (SMOKE, 1) if args.smoke else (FULL, args.rounds)
    out = output_path(args, "edge_stalls.json")
    logs = logs_dir(out, "edge-stalls-logs")
    logs.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="neuraxis-bench-edge-"))
    flags = ["--auth", "required", "--state-dir", str(state)]
    neuron = ["--sim-ttft-s", "0", "--sim-itl-s", "0", "--max-model-len", "8192"]
    per_round: dict[str, list[tuple[list[float], Counter[str]]]] = {a: [] for a in attacks}
    with sim_gateway(logs, "edge", *flags, served_id=MODEL, neuron_flags=neuron) as gateway:
        key = new_key(state, "bench-edge")
        target = Target(gateway.base_url, key, gateway.cortex.proc.log_path)
        prober = Prober(gateway.base_url)
        try:
            for i in range(rounds):
                for name, attack in attacks.items():
                    prober.cut()
                    outcomes = asyncio.run(attack(target, sizes))
                    samples = prober.cut()
                    per_round[name].append((samples, outcomes))
                    p99 = _ms(samples, 0.99)
                    print(f"  round {i + 1} {name}: p99 {p99:.1f} ms, {dict(outcomes)}")
        finally:
            prober.stop()
    summary: dict[str, dict[str, object]] = {}
    for name, runs in per_round.items():
        summary[name] = {
            "p50_ms": statistics.median(_ms(s, 0.5) for s, _ in runs),
            "p99_ms": statistics.median(_ms(s, 0.99) for s, _ in runs),
            "max_ms": max(_ms(s, 1.0) for s, _ in runs),
            "probes": sum(len(s) for s, _ in runs),
            "outcomes": ", ".join(
                f"{k}: {v}" for k, v in sum((o for _, o in runs), Counter()).items()
            ),
        }
    write_results(out, "edge_stalls", report(summary, rounds), summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
