"""The soak's memory figures: a minute's median, not one instant."""

from __future__ import annotations

from harness.soak_record import Sample, Soak, rss_by_minute, summarize


def _samples(rss: list[float], start_s: float = 0.0) -> list[Sample]:
    return [Sample(start_s + i, mb, 10) for i, mb in enumerate(rss)]


def test_each_minute_is_the_median_of_its_samples() -> None:
    rss = [100.0] * 59 + [300.0] + [110.0] * 60 + [120.0] * 45
    assert rss_by_minute(_samples(rss)) == [100.0, 110.0, 120.0]


def test_a_short_last_part_joins_the_minute_before() -> None:
    rss = [100.0] * 60 + [110.0] * 60 + [500.0] * 10
    assert rss_by_minute(_samples(rss)) == [100.0, 110.0]


def test_growth_is_last_minute_over_first_and_a_spike_does_not_count() -> None:
    soak = Soak()
    # Warm-up (excluded), then two minutes; the last sample is a spike.
    soak.samples = _samples([50.0] * 30 + [100.0] * 60 + [104.0] * 59 + [180.0])
    summary = summarize(soak, warmup_s=30, load_s=200)
    assert summary["rss_first_minute_mb"] == 100.0
    assert summary["rss_last_minute_mb"] == 104.0
    assert abs(float(summary["rss_growth_pct"]) - 4.0) < 1e-9
    assert summary["rss_last_sample_mb"] == 180.0
    assert summary["rss_by_minute_mb"] == "100.0 104.0"
