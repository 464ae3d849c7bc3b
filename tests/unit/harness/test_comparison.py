"""The comparison's arithmetic: percentiles, per-side metrics from batches,
neuraxis against vLLM (ratios and differences), the median over runs."""

from __future__ import annotations

import math

import pytest

from harness.chat_stream import Batch, Stream
from harness.comparison import NEURAXIS, VLLM, compare, median_comparison, metrics, percentile


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert math.isnan(percentile([], 50))


def test_metrics_pool_the_batches_of_a_side() -> None:
    a = Batch([Stream(0.1, (0.02, 0.04), 3)], wall_s=1.0, cpu_s={"neuron": 0.3})
    b = Batch([Stream(0.3, (0.06,), 2)], wall_s=1.5, cpu_s={"neuron": 0.2, "cortex": 0.5})
    m = metrics([a, b], max_tokens=3)
    assert m["requests"] == 2
    assert m["full_length"] == 1
    assert m["tokens_per_s"] == pytest.approx(5 / 2.5)
    assert m["itl_p50_ms"] == pytest.approx(40.0)
    assert m["ttft_p99_ms"] == pytest.approx(300.0)
    assert m["cpu_ms_per_token_by_role"] == pytest.approx({"neuron": 100.0, "cortex": 100.0})
    assert m["cpu_ms_per_token"] == pytest.approx(200.0)


def _side(tokens_per_s: float, ttft: float, itl: float) -> dict[str, float]:
    return {
        "tokens_per_s": tokens_per_s,
        "ttft_p50_ms": ttft,
        "ttft_p99_ms": ttft,
        "itl_p50_ms": itl,
        "itl_p99_ms": itl,
        "cpu_ms_per_token": 2.0,
    }


def test_throughput_and_itl_are_ratios_ttft_a_difference() -> None:
    out = compare(_side(98.0, 105.0, 31.0), _side(100.0, 100.0, 30.0))
    assert out["tokens_per_s"] == pytest.approx(0.98)
    assert out["ttft_p50_ms"] == pytest.approx(5.0)
    assert out["itl_p50_ms"] == pytest.approx(31 / 30)
    assert out["cpu_ms_per_token"] == pytest.approx(1.0)


def test_the_summary_is_the_median_over_runs() -> None:
    runs = [
        {"1": {"compare": compare(_side(t, 100.0, 30.0), _side(100.0, 100.0, 30.0))}}
        for t in (90.0, 99.0, 95.0)
    ]
    assert median_comparison(runs, 1)["tokens_per_s"] == pytest.approx(0.95)
    assert NEURAXIS != VLLM
