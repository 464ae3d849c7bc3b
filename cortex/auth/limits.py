"""The rate-limit arithmetic, pure: given a key's limits, its usage and the
time, admit or refuse a request, settle it when it ends, and the headers
that say where the key stands. No I/O: the limiter (limiter.py) runs these
inside the store's atomic update, and the tests run them on a fake clock.

Requests and tokens are counted per fixed one-minute window (aligned to the
epoch minute, so every instance and worker agrees on the window without
talking): a key's `rpm` requests and `tpm` tokens per window. Tokens are
reserved at admission (the prompt estimate plus the output cap) and
settled to the real usage when the request ends, so concurrent requests
can never together pass the budget; what a request did not use is given
back to the window it was reserved in (a settlement after the window
turned changes nothing: the new window never held it). `max_concurrent`
counts requests in flight, whatever the window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cortex.store.keys import Usage

WINDOW_S = 60
# A request refused for concurrency is told to retry after this: the slot
# frees when some request ends, which cannot be known in advance.
CONCURRENCY_RETRY_S = 1.0


@dataclass(frozen=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None

    @property
    def any(self) -> bool:
        return self.rpm is not None or self.tpm is not None or self.max_concurrent is not None


def window_of(now: float) -> int:
    return int(now // WINDOW_S) * WINDOW_S


def current(usage: Usage, now: float) -> Usage:
    """The usage as of `now`: a window that has passed counts nothing."""
    window = window_of(now)
    if usage.window == window:
        return usage
    return Usage(window=window, requests=0, tokens=0, in_flight=usage.in_flight)


@dataclass(frozen=True)
class Decision:
    admitted: bool
    usage: Usage  # after the decision (what was stored when admitted)
    retry_after_s: float = 0.0
    limit: str | None = None  # what refused it: "requests", "tokens", "concurrency"
    message: str = ""


def admit(limits: Limits, usage: Usage, now: float, tokens: int, holder: str = "key") -> Decision:
    """Admit a request that may use `tokens`, or say which limit refuses it
    and when to retry (`holder`: whose limits they are, "key" or "tenant")."""
    seen = current(usage, now)
    refusal = _refusal(limits, seen, now, tokens, holder)
    if refusal is not None:
        retry_after_s, limit, message = refusal
        return Decision(False, seen, retry_after_s, limit, message)
    after = Usage(seen.window, seen.requests + 1, seen.tokens + tokens, seen.in_flight + 1)
    return Decision(True, after)


def precheck(limits: Limits, usage: Usage, now: float, holder: str = "key") -> Decision:
    """Whether the key could be admitted at all now (a request of no
    tokens), reserving nothing: checked from the headers, before a body is
    read, so that a key at its rate is not worth a parse."""
    seen = current(usage, now)
    refusal = _refusal(limits, seen, now, 0, holder)
    if refusal is None:
        return Decision(True, seen)
    retry_after_s, limit, message = refusal
    return Decision(False, seen, retry_after_s, limit, message)


def _refusal(
    limits: Limits, seen: Usage, now: float, tokens: int, holder: str
) -> tuple[float, str, str] | None:
    """The first limit the request would pass: when to retry, the limit's
    name and the message (None: none refuses it)."""
    of = "" if holder == "key" else f" of this {holder}"
    if limits.max_concurrent is not None and seen.in_flight >= limits.max_concurrent:
        message = f"Too many concurrent requests for this {holder}: limit {limits.max_concurrent}."
        return CONCURRENCY_RETRY_S, "concurrency", message
    until_reset = seen.window + WINDOW_S - now
    if limits.rpm is not None and seen.requests + 1 > limits.rpm:
        message = (
            f"Rate limit reached for requests per minute{of}: limit {limits.rpm}, "
            f"used {seen.requests}."
        )
        return until_reset, "requests", message
    if limits.tpm is not None and seen.tokens + tokens > limits.tpm:
        message = (
            f"Rate limit reached for tokens per minute{of}: limit {limits.tpm}, used "
            f"{seen.tokens}, requested {tokens}."
        )
        return until_reset, "tokens", message
    return None


def settle(usage: Usage, now: float, window: int, reserved: int, used: int) -> Usage:
    """The usage once a request reserved `reserved` tokens in `window` and
    used `used`: the difference goes back to that window, if still current."""
    seen = current(usage, now)
    if seen.window != window:
        return seen
    return Usage(seen.window, seen.requests, max(0, seen.tokens - reserved + used), seen.in_flight)


def _duration(seconds: float) -> str:
    # OpenAI's spelling: "1s", "6m0s", "20ms".
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def headers(limits: Limits, usage: Usage, now: float) -> dict[str, str]:
    """OpenAI's x-ratelimit-* headers for the limits the key has."""
    seen = current(usage, now)
    reset = _duration(seen.window + WINDOW_S - now)
    out: dict[str, str] = {}
    for what, limit, used in (
        ("requests", limits.rpm, seen.requests),
        ("tokens", limits.tpm, seen.tokens),
    ):
        if limit is not None:
            out[f"x-ratelimit-limit-{what}"] = str(limit)
            out[f"x-ratelimit-remaining-{what}"] = str(max(0, limit - used))
            out[f"x-ratelimit-reset-{what}"] = reset if used else "0s"
    if limits.max_concurrent is not None:
        # OpenAI has no concurrency limit and so no header for it; these
        # follow its naming. A key limited only in concurrency gets no
        # requests/tokens trio: made-up numbers there would mislead the
        # clients that pace themselves on them.
        out["x-ratelimit-limit-concurrent-requests"] = str(limits.max_concurrent)
        remaining = max(0, limits.max_concurrent - seen.in_flight)
        out["x-ratelimit-remaining-concurrent-requests"] = str(remaining)
    return out


# The header families `headers` writes, each named by its remaining count.
_FAMILIES = ("requests", "tokens", "concurrent-requests")


def tightest(first: dict[str, str], second: dict[str, str]) -> dict[str, str]:
    """Two holders' headers (a tenant's and its key's) as one set: of each
    kind of limit, the trio of the holder with less remaining, which is the
    one a client pacing itself must respect."""
    out = {**first}
    for family in _FAMILIES:
        remaining = f"x-ratelimit-remaining-{family}"
        if remaining not in second:
            continue
        if remaining in first and int(first[remaining]) <= int(second[remaining]):
            continue
        for part in ("limit", "remaining", "reset"):
            name = f"x-ratelimit-{part}-{family}"
            out.pop(name, None)
            if name in second:
                out[name] = second[name]
    return out
