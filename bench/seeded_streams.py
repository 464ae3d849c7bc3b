"""Concurrent streamed chats that set `seed`, the load that killed vLLM
0.32's CPU engine (issue 31 point 9; the fix: neuron/engine/vllm/cpu_seed.py).

Starts `neuraxis up` and sends, all at once, `--streams` streamed chat
requests with temperature 0.8, 32 to 64 tokens each, first without a seed
(the control), then each with a seed of its own; each prompt is ~200 tokens
of its own, so that some are prefilled in chunks. Before the fix the seeded
round ended the engine: every stream on the replica failed and the model was
unavailable until the controller replaced it. Prints, per round, how many
streams finished and whether the chat replica's neuron is the same process
after it (an engine death ends the neuron).

    make bench-seeded
    python -m bench.seeded_streams --smoke   # four streams (make test)
"""

from __future__ import annotations

import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from harness.bench_stack import (
    CHAT_MODEL,
    RESULTS,
    output_path,
    parser,
    running_stack,
)
from harness.plots import markdown_table, write_results
from harness.procs import neuron_addresses
from harness.streamed_chat import CHAT_PATH, StreamedChat, read_sync

HEADER = ("round", "streams", "finished", "failed", "seconds", "same chat neuron after")
QUESTIONS = (
    "Write a short story about a robot.",
    "Describe the sea in a few sentences.",
    "List some fruits and their colours.",
    "Explain what a computer does.",
)


# Words for each stream's notes: prompts of their own (no shared prefix for
# the cache to skip), ~200 tokens each, so that 64 of them take the engine
# several prefill steps and some prompts are prefilled in chunks, the trigger.
WORDS = ("sea", "ship", "wind", "river", "stone", "bird", "cloud", "field", "light")


def _prompt(i: int, rng: random.Random) -> str:
    notes = " ".join(rng.choice(WORDS) for _ in range(150))
    return f"Notes {i}: {notes}. {QUESTIONS[i % len(QUESTIONS)]}"


def _bodies(streams: int, seeded: bool, max_tokens: tuple[int, int]) -> list[dict[str, Any]]:
    rng = random.Random(31)
    bodies = []
    for i in range(streams):
        body: dict[str, Any] = {
            "model": CHAT_MODEL,
            "messages": [{"role": "user", "content": _prompt(i, rng)}],
            "temperature": 0.8,
            "max_tokens": rng.randint(*max_tokens),
            "stream": True,
        }
        if seeded:
            body["seed"] = 1000 + i
        bodies.append(body)
    return bodies


def _round(base_url: str, bodies: list[dict[str, Any]]) -> tuple[list[StreamedChat], float]:
    """All of `bodies` streamed at once; what each saw and the seconds taken."""
    started = time.monotonic()
    with (
        httpx.Client(base_url=base_url, timeout=600) as client,
        ThreadPoolExecutor(len(bodies)) as pool,
    ):
        seen = list(pool.map(lambda body: read_sync(client, CHAT_PATH, body), bodies))
    return seen, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--streams", type=int, default=64, help="streams sent at once")
    args = cli.parse_args(argv)
    max_tokens = (32, 64)
    if args.smoke:
        args.streams, max_tokens = 4, (4, 8)
    rows: list[tuple[object, ...]] = []
    summary: dict[str, Any] = {}
    failed = 0
    with running_stack(args, RESULTS / "up-seeded.log") as target:
        for name, seeded in (("no seed", False), ("seeded", True)):
            before = neuron_addresses(target.admin_url).get(CHAT_MODEL)
            seen, seconds = _round(target.base_url, _bodies(args.streams, seeded, max_tokens))
            after = neuron_addresses(target.admin_url).get(CHAT_MODEL)
            finished = sum(s.finished for s in seen)
            errors = sorted({s.error or "" for s in seen if not s.finished})
            same = "yes" if before == after else f"no ({before} -> {after})"
            failed += args.streams - finished
            rows.append(
                (name, args.streams, finished, args.streams - finished, round(seconds, 1), same)
            )
            summary[name] = {"finished": finished, "seconds": seconds, "errors": errors}
            print(f"{name}: {finished}/{args.streams} finished in {seconds:.1f} s {errors[:3]}")
    text = markdown_table(HEADER, rows)
    print()
    print(text)
    out = output_path(args, "seeded_streams/seeded_streams.json")
    write_results(out, "seeded_streams", text, summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
