"""How early streamed tool calls reach the client under tool_choice auto.

Starts `neuraxis up` and streams, through /v1/chat/completions, three greedy
conversations that make SmolLM2 answer with calls (harness/toolcalls.py): one
call, a sentence then a call, two calls. For each it prints the median time
from the request to the first text delta, to the first tool-call delta (the
call's id and name) and to the stream's end. When calls were held until the
answer ended and parsed once, the first tool-call delta came with the end.

    make bench-tool-stream
    python -m bench.tool_stream --smoke   # one request per case (make test)
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from harness.bench_stack import (
    CHAT_MODEL,
    RESULTS,
    output_path,
    parser,
    running_stack,
    write_summary,
)
from harness.plots import markdown_table, write_markdown
from harness.toolcalls import CALLS_TWICE, CHAT_ASKED_AGAIN, SAYS_THEN_CALLS, timed_tool_choices

CASES: dict[str, Any] = {
    "one call": CHAT_ASKED_AGAIN,
    "text then a call": SAYS_THEN_CALLS,
    "two calls": CALLS_TWICE,
}
HEADER = ("case", "first text (ms)", "first tool-call delta (ms)", "end of stream (ms)")


def _times(base_url: str, messages: Any) -> dict[str, float | None]:
    """One streamed request: when its first text, its first tool-call delta
    and its last chunk arrived (s from the request; None: never)."""
    chunks = [(t, c["delta"]) for t, c in timed_tool_choices(base_url, CHAT_MODEL, messages)]
    text = next((t for t, d in chunks if d.get("content")), None)
    call = next((t for t, d in chunks if d.get("tool_calls")), None)
    return {"first_text_s": text, "first_call_s": call, "end_s": chunks[-1][0]}


def _median_ms(runs: list[dict[str, float | None]], key: str) -> float | None:
    values = [v for r in runs if (v := r[key]) is not None]
    return statistics.median(values) * 1000 if values else None


def measure(base_url: str, runs: int) -> dict[str, dict[str, float | None]]:
    summary = {}
    for name, messages in CASES.items():
        times = [_times(base_url, messages) for _ in range(runs)]
        summary[name] = {
            "first_text_ms": _median_ms(times, "first_text_s"),
            "first_call_ms": _median_ms(times, "first_call_s"),
            "end_ms": _median_ms(times, "end_s"),
        }
    return summary


def _cell(value: float | None) -> object:
    return "-" if value is None else round(value)


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--runs", type=int, default=5, help="requests per case (median)")
    args = cli.parse_args(argv)
    if args.smoke:
        args.runs = 1
    with running_stack(args, RESULTS / "up-tool-stream.log") as target:
        summary = measure(target.base_url, args.runs)
    rows = [
        (name, _cell(s["first_text_ms"]), _cell(s["first_call_ms"]), _cell(s["end_ms"]))
        for name, s in summary.items()
    ]
    table = markdown_table(HEADER, rows)
    print()
    print(table)
    path = output_path(args, "tool_stream.json")
    write_summary(path, summary)
    if path is not None:
        print(f"written: {write_markdown(path.parent, 'tool_stream', table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
