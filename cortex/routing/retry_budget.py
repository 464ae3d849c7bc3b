"""The retry budget: how many requests may be retrying at once across the
pool, so that a bad minute cannot multiply the load on the neurons left.

At most `ratio` of the requests in flight (default 20 %, Envoy's), and never
fewer than `minimum` (default 3, so a quiet pool can still retry), hold a
retry at any moment. Each request holds a `Ticket` from its start to its
end; its first retry takes a slot of the budget, kept until the request ends.
A request during which an engine died is retried at most once: the request
itself may be what killed it, and must not kill the fleet one engine at a
time.

Moving a request off a neuron that is down (unreachable, or declared gone by
its health checks) before its first token spends no budget: that is
failover, not a second run of the work. The neuron's share of the requests
in flight must go somewhere, and the neurons left get no more than they
would have had it never been chosen; a budget there turned a lost neuron
into failed requests (the soak: 102 of 10,591 under 200 streams). It still
counts toward the request's `max_retries` and the engine-death rule.
"""

from __future__ import annotations

import math
from types import TracebackType

from pydantic import Field, NonNegativeFloat, NonNegativeInt

from axon.settings import SettingsGroup


class RetryBudgetOptions(SettingsGroup):
    """How many requests may be retrying at once."""

    ratio: NonNegativeFloat = Field(
        0.2,
        le=1,
        description="at most this share of the requests in flight may be retrying at once "
        "(a request during which an engine died is retried at most once)",
    )
    minimum: NonNegativeInt = Field(
        3, description="retries allowed at once however few requests are in flight"
    )


class RetryBudget:
    def __init__(self, options: RetryBudgetOptions | None = None) -> None:
        self._options = options or RetryBudgetOptions()
        self.in_flight = 0
        self.retrying = 0

    def ticket(self) -> Ticket:
        """One request's share, to be used as a context manager."""
        return Ticket(self)

    def _allowance(self) -> int:
        return max(self._options.minimum, math.floor(self._options.ratio * self.in_flight))


class Ticket:
    """One request's retries: whether the next may go, and the budget slot
    it holds once it has retried."""

    def __init__(self, budget: RetryBudget) -> None:
        self._budget = budget
        self.retries = 0
        self.engine_deaths = 0
        self._holds_slot = False

    def __enter__(self) -> Ticket:
        self._budget.in_flight += 1
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._budget.in_flight -= 1
        if self._holds_slot:
            self._budget.retrying -= 1

    def refusal(self, engine_died: bool, neuron_down: bool = False) -> str | None:
        """Take the next retry, or say why it may not go (None: it may).
        `neuron_down`: the failed attempt's neuron is down (no budget spent)."""
        if engine_died:
            self.engine_deaths += 1
        if self.engine_deaths and self.retries >= 1:
            return "an engine died during this request, which was already retried once"
        if not self._holds_slot and not neuron_down:
            if self._budget.retrying >= self._budget._allowance():
                return "the retry budget is spent"
            self._budget.retrying += 1
            self._holds_slot = True
        self.retries += 1
        return None
