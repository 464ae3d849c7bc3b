"""The load estimate every policy uses: the larger of this cortex's count and
the engine's fresh running + waiting."""

from __future__ import annotations

from cortex.routing.load import effective_load, saturated
from cortex.routing.policy import Candidate, EngineLoad


def _candidate(outstanding: int, running: int, waiting: int, measured_at: float) -> Candidate:
    load = EngineLoad(running=running, waiting=waiting, measured_at=measured_at)
    return Candidate("load:1", outstanding=outstanding, load=load)


def test_without_an_engine_report_the_outstanding_count_is_the_load() -> None:
    assert effective_load(Candidate("load:1", outstanding=3), now=10.0, max_age_s=2.0) == 3


def test_a_fresh_report_of_more_work_than_ours_wins() -> None:
    # Other cortex processes' requests are on the engine as well.
    assert effective_load(_candidate(2, 5, 3, measured_at=9.0), now=10.0, max_age_s=2.0) == 8


def test_our_newer_count_wins_over_a_report_that_has_not_seen_it_yet() -> None:
    assert effective_load(_candidate(6, 1, 0, measured_at=9.5), now=10.0, max_age_s=2.0) == 6


def test_a_stale_report_is_ignored() -> None:
    assert effective_load(_candidate(2, 5, 3, measured_at=7.9), now=10.0, max_age_s=2.0) == 2


def _kv(usage: float | None, measured_at: float = 9.0) -> Candidate:
    load = EngineLoad(running=0, waiting=0, measured_at=measured_at, kv_cache_usage=usage)
    return Candidate("kv:1", outstanding=0, load=load)


def test_a_fresh_kv_usage_at_the_limit_is_saturated() -> None:
    assert saturated(_kv(0.8), now=10.0, max_age_s=2.0, kv_limit=0.8)
    assert not saturated(_kv(0.79), now=10.0, max_age_s=2.0, kv_limit=0.8)


def test_an_unknown_or_stale_kv_usage_is_not_saturated() -> None:
    assert not saturated(_kv(None), now=10.0, max_age_s=2.0, kv_limit=0.8)
    assert not saturated(_kv(0.99, measured_at=7.0), now=10.0, max_age_s=2.0, kv_limit=0.8)
    assert not saturated(Candidate("kv:1", outstanding=9), now=10.0, max_age_s=2.0, kv_limit=0.8)


def _reported(outstanding: int, engine: int, own: int) -> Candidate:
    load = EngineLoad(running=engine, waiting=0, measured_at=9.5, own=own)
    return Candidate("own:1", outstanding=outstanding, load=load)


def test_a_report_that_knows_our_count_adds_only_the_others_share() -> None:
    # The engine ran 4 when the report came, all 4 ours; 3 have ended since:
    # the report is not load any more (the larger-of rule said 4).
    assert effective_load(_reported(1, engine=4, own=4), now=10.0, max_age_s=2.0) == 1
    # 2 of the engine's 5 were another cortex's: they still count.
    assert effective_load(_reported(1, engine=5, own=3), now=10.0, max_age_s=2.0) == 3
    # The engine had not yet seen all of ours: no negative share.
    assert effective_load(_reported(6, engine=1, own=3), now=10.0, max_age_s=2.0) == 6
