"""The soak's record and its figures (bench/soak.py runs it): each request as
the client saw it, cortex's memory and descriptors sampled over the run, and
the summary drawn from them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from harness.streamed_chat import StreamedChat


@dataclass
class Sample:
    at_s: float
    rss_mb: float
    fds: int


@dataclass
class Soak:
    requests: list[StreamedChat] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


def summarize(soak: Soak, warmup_s: float, load_s: float) -> dict[str, float | str]:
    """The figures; cortex's memory and descriptors from the warm-up's end to
    the last sample while the load still ran."""
    requests = soak.requests
    ttfts = sorted(r.ttft for r in requests if r.ttft is not None)
    cut = [r for r in requests if r.ttft is not None and not r.finished]
    during = [s for s in soak.samples if warmup_s <= s.at_s <= load_s - 1]
    after = during or soak.samples
    first, last = after[0], after[-1]
    minutes = rss_by_minute(after)
    return {
        "requests": len(requests),
        "completed": sum(r.finished for r in requests),
        "failed_before_first_token": sum(1 for r in requests if r.ttft is None),
        "cut_mid_stream": len(cut),
        "cut_with_terminal_event": sum(1 for r in cut if _terminal(r)),
        "cut_without_terminal_event": sum(1 for r in cut if not _terminal(r)),
        "ttft_p50_ms": statistics.median(ttfts) * 1000 if ttfts else 0.0,
        "ttft_p99_ms": ttfts[int(len(ttfts) * 0.99) - 1] * 1000 if ttfts else 0.0,
        "faults": len(soak.faults),
        # One sample is one instant of 200 streams in flight and swings by
        # a few MB; a minute's median says where memory sits. The growth is
        # the last minute's median over the first's.
        "rss_first_sample_mb": first.rss_mb,
        "rss_last_sample_mb": last.rss_mb,
        "rss_first_minute_mb": minutes[0],
        "rss_last_minute_mb": minutes[-1],
        "rss_growth_pct": (minutes[-1] / minutes[0] - 1) * 100,
        # The trend, not two points: a leak climbs minute after minute, an
        # allocator's high-water mark levels off.
        "rss_by_minute_mb": " ".join(f"{mb:.1f}" for mb in minutes),
        "fds_start": first.fds,
        "fds_end": last.fds,
    }


def _terminal(request: StreamedChat) -> bool:
    """Cut with its error event and [DONE], as a stream should end."""
    return request.error_event is not None and request.done


def rss_by_minute(samples: list[Sample]) -> list[float]:
    """The median RSS of each minute of `samples` (a last part shorter than
    half a minute joins the minute before it)."""
    start = samples[0].at_s
    minutes: list[list[float]] = []
    for sample in samples:
        index = int((sample.at_s - start) // 60)
        if index == len(minutes):
            minutes.append([])
        minutes[-1].append(sample.rss_mb)
    if len(minutes) > 1 and len(minutes[-1]) < 30:
        short = minutes.pop()
        minutes[-1] += short
    return [statistics.median(minute) for minute in minutes]
