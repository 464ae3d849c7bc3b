"""The rate-limit arithmetic on a hand-moved clock: windows, reservations,
settlements, refusals and the headers."""

from __future__ import annotations

from cortex.auth.limits import Limits, admit, headers, precheck, settle, tightest, window_of
from cortex.store.keys import Usage

T0 = 1_800_000_000.0  # a window start (divisible by 60)


def test_a_request_reserves_one_request_and_its_tokens() -> None:
    decision = admit(Limits(rpm=10, tpm=1000), Usage(), T0 + 5, tokens=300)
    assert decision.admitted
    assert decision.usage == Usage(window=int(T0), requests=1, tokens=300, in_flight=1)


def test_requests_beyond_rpm_are_refused_until_the_window_turns() -> None:
    limits = Limits(rpm=2)
    usage = Usage(window=int(T0), requests=2, tokens=0)
    refused = admit(limits, usage, T0 + 15, tokens=1)
    assert not refused.admitted and refused.limit == "requests"
    assert refused.retry_after_s == 45
    assert refused.usage.requests == 2  # nothing taken
    assert admit(limits, usage, T0 + 60, tokens=1).admitted


def test_tokens_beyond_tpm_are_refused_and_an_exact_fit_is_not() -> None:
    limits = Limits(tpm=1000)
    usage = Usage(window=int(T0), requests=3, tokens=700)
    assert admit(limits, usage, T0 + 1, tokens=300).admitted
    refused = admit(limits, usage, T0 + 1, tokens=301)
    assert not refused.admitted and refused.limit == "tokens"
    assert "limit 1000" in refused.message and "requested 301" in refused.message


def test_concurrency_counts_requests_in_flight_whatever_the_window() -> None:
    limits = Limits(max_concurrent=2)
    busy = Usage(window=int(T0) - 600, requests=0, tokens=0, in_flight=2)
    refused = admit(limits, busy, T0, tokens=1)
    assert not refused.admitted and refused.limit == "concurrency"
    assert refused.retry_after_s > 0
    assert admit(limits, Usage(in_flight=1), T0, tokens=1).admitted


def test_settling_gives_back_what_was_not_used() -> None:
    reserved = Usage(window=int(T0), requests=2, tokens=900)
    after = settle(reserved, T0 + 30, int(T0), reserved=800, used=120)
    assert after == Usage(window=int(T0), requests=2, tokens=220)


def test_a_failed_request_gives_back_everything_and_never_goes_negative() -> None:
    usage = Usage(window=int(T0), requests=1, tokens=100)
    assert settle(usage, T0 + 1, int(T0), reserved=500, used=0).tokens == 0


def test_settling_after_the_window_turned_leaves_the_new_window_alone() -> None:
    usage = Usage(window=int(T0) + 60, requests=1, tokens=50)
    after = settle(usage, T0 + 61, int(T0), reserved=800, used=10)
    assert after.tokens == 50 and after.window == int(T0) + 60


def test_a_reservation_in_a_new_window_starts_from_zero() -> None:
    old = Usage(window=int(T0), requests=9, tokens=999)
    decision = admit(Limits(rpm=10, tpm=1000), old, T0 + 61, tokens=10)
    assert decision.usage == Usage(window=int(T0) + 60, requests=1, tokens=10, in_flight=1)


def test_reservations_never_add_up_past_the_budget() -> None:
    limits, usage, admitted = Limits(tpm=10_000), Usage(), 0
    for i in range(100):
        decision = admit(limits, usage, T0 + i * 0.1, tokens=333)
        if decision.admitted:
            usage, admitted = decision.usage, admitted + 333
    assert admitted == 30 * 333 and usage.tokens <= 10_000


def test_headers_say_where_the_key_stands() -> None:
    usage = Usage(window=int(T0), requests=3, tokens=1200)
    got = headers(Limits(rpm=10, tpm=5000), usage, T0 + 20.5)
    assert got == {
        "x-ratelimit-limit-requests": "10",
        "x-ratelimit-remaining-requests": "7",
        "x-ratelimit-reset-requests": "40s",
        "x-ratelimit-limit-tokens": "5000",
        "x-ratelimit-remaining-tokens": "3800",
        "x-ratelimit-reset-tokens": "40s",
    }


def test_headers_only_for_the_limits_a_key_has() -> None:
    got = headers(Limits(tpm=100), Usage(), T0)
    assert set(got) == {
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
    }
    assert got["x-ratelimit-reset-tokens"] == "0s"  # nothing used: nothing to reset


def test_a_concurrency_limit_has_headers_of_its_own() -> None:
    got = headers(Limits(max_concurrent=4), Usage(window=int(T0), in_flight=3), T0 + 1)
    assert got == {
        "x-ratelimit-limit-concurrent-requests": "4",
        "x-ratelimit-remaining-concurrent-requests": "1",
    }


def test_windows_are_aligned_to_the_minute() -> None:
    assert window_of(T0 + 59.999) == int(T0)
    assert window_of(T0 + 60) == int(T0) + 60


def test_the_precheck_refuses_a_key_at_its_rate_and_reserves_nothing() -> None:
    full = Usage(window=int(T0), requests=2, tokens=0, in_flight=1)
    refused = precheck(Limits(rpm=2), full, T0 + 15)
    assert not refused.admitted and refused.limit == "requests"
    assert refused.usage == full
    assert not precheck(Limits(max_concurrent=1), full, T0).admitted
    room = precheck(Limits(rpm=3, max_concurrent=2), full, T0)
    assert room.admitted and room.usage == full
    assert precheck(Limits(rpm=2), full, T0 + 60).admitted  # the window turned


def test_tightest_takes_each_kind_from_the_holder_with_less_left() -> None:
    tenant = headers(Limits(tpm=100, max_concurrent=3), Usage(0, 0, 90, 1), 0.0)
    key = headers(Limits(rpm=5, tpm=1000, max_concurrent=2), Usage(0, 1, 50, 1), 0.0)
    merged = tightest(key, tenant)
    assert merged["x-ratelimit-limit-tokens"] == "100"
    assert merged["x-ratelimit-remaining-tokens"] == "10"
    assert merged["x-ratelimit-limit-requests"] == "5"
    assert merged["x-ratelimit-limit-concurrent-requests"] == "2"
    assert tightest({}, tenant) == tenant
    assert tightest(tenant, {}) == tenant


def test_a_tenant_refusal_names_the_tenant() -> None:
    decision = admit(Limits(max_concurrent=1), Usage(in_flight=1), 0.0, 0, "tenant")
    assert not decision.admitted and "for this tenant" in decision.message
    decision = admit(Limits(tpm=10), Usage(), 0.0, 20, "tenant")
    assert "tokens per minute of this tenant" in decision.message
