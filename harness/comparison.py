"""neuraxis against vLLM's own server, the arithmetic (bench/vs_vllm.py runs
it): nearest-rank percentiles, each side's figures from its batches, the
comparison (ratios and differences) and the median over runs."""

from __future__ import annotations

import math
import statistics
from typing import Any

from harness.chat_stream import Batch

NEURAXIS, VLLM = "neuraxis", "vllm serve"


# (metric key, label, how neuraxis is compared: "ratio" or "delta")
METRICS = (
    ("tokens_per_s", "output tokens/s", "ratio"),
    ("ttft_p50_ms", "TTFT p50 (ms)", "delta"),
    ("ttft_p99_ms", "TTFT p99 (ms)", "delta"),
    ("itl_p50_ms", "inter-token p50 (ms)", "ratio"),
    ("itl_p99_ms", "inter-token p99 (ms)", "ratio"),
    ("cpu_ms_per_token", "CPU ms / output token", "ratio"),
)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def metrics(batches: list[Batch], max_tokens: int) -> dict[str, Any]:
    streams = [s for b in batches for s in b.streams]
    ttfts = [s.ttft_s * 1000 for s in streams]
    gaps = [g * 1000 for s in streams for g in s.gaps_s]
    tokens = sum(b.tokens for b in batches)
    cpu: dict[str, float] = {}
    for b in batches:
        for name, seconds in b.cpu_s.items():
            cpu[name] = cpu.get(name, 0.0) + seconds
    per_token = {k: v / tokens * 1000 for k, v in cpu.items()} if tokens else {}
    return {
        "requests": len(streams),
        "full_length": sum(1 for s in streams if s.tokens == max_tokens),
        "tokens": tokens,
        "tokens_per_s": tokens / sum(b.wall_s for b in batches),
        "ttft_p50_ms": percentile(ttfts, 50),
        "ttft_p99_ms": percentile(ttfts, 99),
        "itl_p50_ms": percentile(gaps, 50),
        "itl_p99_ms": percentile(gaps, 99),
        "cpu_ms_per_token": sum(per_token.values()) if per_token else float("nan"),
        "cpu_ms_per_token_by_role": per_token,
    }


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, _, how in METRICS:
        a, b = float(ours[key]), float(theirs[key])
        out[key] = a - b if how == "delta" else (a / b if b else float("nan"))
    return out


def median_comparison(runs: list[dict[str, Any]], c: int) -> dict[str, float]:
    per_run = [r[str(c)]["compare"] for r in runs]
    return {key: statistics.median(p[key] for p in per_run) for key, _, _ in METRICS}
