"""Outlier ejection: a neuron that fails request after request is taken out
of rotation for a while, instead of drawing the most traffic because its
failures make it look idle.

After `consecutive_failures` failures in a row (INTERNAL, UNAVAILABLE, a
deadline, a broken stream: what the pool counts as the neuron's fault, never
the request's own errors) a neuron is ejected for `base_s` × the number of
times it has been ejected, at most `max_s`. When that time is over it is back
on probation: its next request decides, one success clears it, one failure
ejects it again (for longer). The count of ejections is forgotten once the
neuron has stayed in for `max_s`. The defaults are Envoy's (5, 30 s, 300 s).

Only the bookkeeping lives here, keyed by the neuron's address and read from
an injected clock; which neurons may be ejected at all (never the last ready
replica of a model) is the pool's decision, passed in as `can_eject`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import Field, PositiveFloat

from axon.settings import SettingsGroup


class EjectionOptions(SettingsGroup):
    """Outlier ejection of failing neurons."""

    consecutive_failures: int = Field(
        5,
        ge=1,
        description="failures in a row (INTERNAL, UNAVAILABLE, deadline, broken stream; never "
        "the request's own errors) that eject a neuron (Envoy's 5)",
    )
    base_s: PositiveFloat = Field(
        30.0,
        description="a neuron is ejected for this x the times it has been ejected, then comes "
        "back on probation: one success clears it, one failure ejects it again; the last "
        "ready replica of a model is never ejected (s, Envoy's 30)",
    )
    max_s: PositiveFloat = Field(300.0, description="the longest ejection (s, Envoy's 300)")


@dataclass
class _Record:
    failures: int = 0  # in a row
    times: int = 0  # ejections not yet forgotten
    until: float | None = None  # ejected until then
    probation: bool = False
    back_at: float = 0.0  # when its last ejection ended


class OutlierEjection:
    def __init__(self, options: EjectionOptions, clock: Callable[[], float]) -> None:
        self._options = options
        self._clock = clock
        self._records: dict[str, _Record] = {}

    def ejected(self, address: str) -> bool:
        """Whether the neuron is out now; an ejection that has run out puts
        it on probation."""
        record = self._records.get(address)
        if record is None or record.until is None:
            return False
        now = self._clock()
        if now < record.until:
            return True
        record.until, record.probation, record.back_at = None, True, now
        return False

    def on_probation(self, address: str) -> bool:
        record = self._records.get(address)
        return record is not None and record.probation

    def success(self, address: str) -> None:
        record = self._records.get(address)
        if record is not None:
            record.failures = 0
            record.probation = False

    def failure(self, address: str, can_eject: bool) -> float | None:
        """Count a failure; return how long the neuron is now ejected for,
        or None. With `can_eject` false the failure is counted, and the
        neuron ejected at a later failure once it may be."""
        record = self._records.setdefault(address, _Record())
        if self.ejected(address):
            return None  # a request that started before the ejection
        now = self._clock()
        if record.times and not record.probation and now - record.back_at >= self._options.max_s:
            record.times = 0  # it stayed in long enough: its past is forgiven
        record.failures += 1
        due = record.probation or record.failures >= self._options.consecutive_failures
        if not (due and can_eject):
            return None
        record.times += 1
        seconds = min(self._options.base_s * record.times, self._options.max_s)
        record.until, record.failures, record.probation = now + seconds, 0, False
        return seconds

    def forget(self, address: str) -> None:
        """A neuron that left the pool."""
        self._records.pop(address, None)
