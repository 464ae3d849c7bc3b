"""A batch beside interactive traffic: interactive TTFT with and without a
5,000-line batch running, and the batch's lines per second on what the
interactive load leaves idle (issue 30's acceptance; target: TTFT within
1.2× of the run without the batch).

One sim neuron with a modelled engine bottleneck (its prefill lane: every
prompt misses its one-block cache and prefills take turns, so the engine
serves about 1 / prefill_s prompts a second), one cortex in front of it.
Two phases, one after the other: the interactive load alone (closed loop,
`--concurrency` streamed chats), then the same load while the batch runs
(uploaded with the Files API, created with the Batch API, run by cortex's
batch runner with `batches.max_in_flight` lines at a time, in the batch
class: admission lets it trickle beside the interactive load, which is in
the default class). The batch is then waited for: lines per second beside
the load, alone after it, and from in_progress to its end.

    make bench-batch
    python -m bench.batch --lines 5000 --seconds 20
    python -m bench.batch --smoke    # 50 lines, a second of load (make test)
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from harness.bench_stack import logs_dir, output_path, parser, write_summary
from harness.comparison import percentile
from harness.gateway import Sim, sim_gateway
from harness.plots import markdown_table, write_markdown
from harness.ratios import ratio
from harness.streamed_chat import read

MODEL = "sim-batch"
PROMPT_CHARS = 400  # 100 sim tokens at 4 characters a token


@dataclass(frozen=True)
class Workload:
    lines: int
    seconds: float
    concurrency: int
    in_flight: int
    prefill_s: float
    tokens: int


def _prompt() -> str:
    # A new prompt each time: the sim's one-block cache never helps.
    return ((uuid.uuid4().hex + " ") * (PROMPT_CHARS // 33))[:PROMPT_CHARS]


def _chat(tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": _prompt()}],
        "max_tokens": tokens,
    }
    if stream:
        body["stream"] = True
    return body


async def interactive(base: str, w: Workload) -> list[float]:
    """Closed-loop streamed chats for w.seconds; their TTFTs (s)."""
    ttfts: list[float] = []
    deadline = time.monotonic() + w.seconds
    async with httpx.AsyncClient(timeout=60) as http:

        async def user() -> None:
            while time.monotonic() < deadline:
                chat = await read(http, f"{base}/v1/chat/completions", _chat(w.tokens, True))
                if chat.ttft is not None:
                    ttfts.append(chat.ttft)

        await asyncio.gather(*(user() for _ in range(w.concurrency)))
    return ttfts


def _input_file(lines: int, tokens: int) -> bytes:
    rows = (
        json.dumps(
            {
                "custom_id": f"line-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": _chat(tokens, False),
            }
        )
        for i in range(lines)
    )
    return ("\n".join(rows) + "\n").encode()


def start_batch(http: httpx.Client, w: Workload) -> str:
    """Upload the input file and create the batch; wait until it runs."""
    files = {"file": ("batch.jsonl", _input_file(w.lines, w.tokens))}
    upload = http.post("/v1/files", files=files, data={"purpose": "batch"})
    upload.raise_for_status()
    body = {
        "input_file_id": upload.json()["id"],
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    created = http.post("/v1/batches", json=body)
    created.raise_for_status()
    batch_id: str = created.json()["id"]
    while _batch(http, batch_id)["status"] == "validating":
        time.sleep(0.05)
    return batch_id


def _batch(http: httpx.Client, batch_id: str) -> dict[str, Any]:
    answer = http.get(f"/v1/batches/{batch_id}")
    answer.raise_for_status()
    batch: dict[str, Any] = answer.json()
    return batch


def finish_batch(http: httpx.Client, batch_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    batch = _batch(http, batch_id)
    while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the batch did not end within {timeout_s:g} s: {batch}")
        time.sleep(0.2)
        batch = _batch(http, batch_id)
    return batch


def _quantiles(ttfts: list[float]) -> dict[str, float]:
    return {
        "requests": float(len(ttfts)),
        "ttft_p50_ms": percentile(ttfts, 50) * 1000,
        "ttft_p99_ms": percentile(ttfts, 99) * 1000,
    }


def measure(w: Workload, logs: Path) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="neuraxis-bench-batch-"))
    per_token = w.prefill_s / (PROMPT_CHARS / 4)
    neuron = ["--sim-ttft-s", "0", "--sim-itl-s", "0.01", "--sim-prefix-cache-blocks", "1"]
    neuron += ["--sim-prefill-s-per-token", str(per_token)]
    # The engine orders its waiting requests by class, as vLLM with
    # scheduling_policy = "priority": the batch's lines run in the batch class.
    neuron += ["--scheduling-policy", "priority"]
    args = ["--state-dir", str(state), "--batches-max-in-flight", str(w.in_flight)]
    args += ["--batches-poll-s", "0.2", "--files-max-lines", str(max(w.lines, 50_000))]
    with sim_gateway(logs, "batch", *args, sims=[Sim(MODEL, neuron)]) as running:
        base = running.base_url
        alone = asyncio.run(interactive(base, w))
        with httpx.Client(base_url=base, timeout=120) as http:
            batch_id = start_batch(http, w)
            started = time.monotonic()
            beside = asyncio.run(interactive(base, w))
            during = _batch(http, batch_id)["request_counts"]["completed"]
            load_ended = time.monotonic()
            batch = finish_batch(http, batch_id, timeout_s=max(600.0, w.lines / 2))
            ended = time.monotonic()
    seconds = (batch["completed_at"] or time.time()) - batch["in_progress_at"]
    counts = batch["request_counts"]
    # The rates beside the interactive load and on the engine left to the
    # batch alone, on this process's clock (the Batch object's timestamps
    # are whole seconds; the end is seen within a poll, 0.2 s).
    after = counts["completed"] - during
    return {
        "alone": _quantiles(alone),
        "with_batch": _quantiles(beside),
        "batch": {
            "status": batch["status"],
            "lines": float(counts["total"]),
            "completed": float(counts["completed"]),
            "failed": float(counts["failed"]),
            "seconds": float(seconds),
            # Whole seconds (the Batch object's timestamps): a rough rate.
            "lines_per_s": ratio(counts["completed"], max(1.0, seconds)),
            "completed_during_load": float(during),
            "lines_per_s_beside_load": ratio(during, load_ended - started),
            "lines_per_s_alone": ratio(after, ended - load_ended) if after > 0 else 0.0,
        },
    }


def report(summary: dict[str, Any], w: Workload, out_dir: Path | None) -> str:
    alone, beside, batch = summary["alone"], summary["with_batch"], summary["batch"]
    rows = [
        ["interactive alone", int(alone["requests"]), alone["ttft_p50_ms"], alone["ttft_p99_ms"]],
        [
            "interactive + batch",
            int(beside["requests"]),
            beside["ttft_p50_ms"],
            beside["ttft_p99_ms"],
        ],
        [
            "ratio",
            "",
            ratio(beside["ttft_p50_ms"], alone["ttft_p50_ms"]),
            ratio(beside["ttft_p99_ms"], alone["ttft_p99_ms"]),
        ],
    ]
    table = markdown_table(["load", "requests", "TTFT p50 (ms)", "TTFT p99 (ms)"], rows)
    batch_table = markdown_table(
        [
            "batch lines",
            "completed",
            "failed",
            "seconds",
            "lines/s",
            "done during the load",
            "lines/s beside the load",
            "lines/s alone",
        ],
        [
            [
                int(batch["lines"]),
                int(batch["completed"]),
                int(batch["failed"]),
                batch["seconds"],
                batch["lines_per_s"],
                int(batch["completed_during_load"]),
                batch["lines_per_s_beside_load"],
                batch["lines_per_s_alone"],
            ]
        ],
    )
    text = "\n".join(
        [
            f"Sim engine: prefill lane at {1 / w.prefill_s:.0f} prompts/s, {w.tokens} tokens an "
            f"answer; interactive: {w.concurrency} streamed chats in a closed loop for "
            f"{w.seconds:g} s; batch: {w.lines} chat lines, {w.in_flight} in flight.",
            "",
            table,
            "",
            batch_table,
        ]
    )
    print()
    print(text)
    if out_dir is not None:
        write_markdown(out_dir, "batch", text)
    return text


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--lines", type=int, default=5000, help="lines in the batch")
    cli.add_argument("--seconds", type=float, default=20.0, help="interactive load per phase")
    cli.add_argument("--concurrency", type=int, default=4, help="interactive streams")
    cli.add_argument("--in-flight", type=int, default=8, help="batches.max_in_flight")
    cli.add_argument("--prefill-s", type=float, default=0.01, help="sim prefill per prompt")
    cli.add_argument("--tokens", type=int, default=8, help="max_tokens of every request")
    args = cli.parse_args(argv)
    if args.smoke:
        args.lines, args.seconds = 50, 1.0
    w = Workload(
        args.lines, args.seconds, args.concurrency, args.in_flight, args.prefill_s, args.tokens
    )
    out = output_path(args, "batch.json")
    logs = logs_dir(out, "batch-logs")
    logs.mkdir(parents=True, exist_ok=True)
    summary = measure(w, logs)
    report(summary, w, out.parent if out is not None else None)
    write_summary(out, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
