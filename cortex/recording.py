"""Where a request's life is recorded: the `Recorder` the request lifecycle
(cortex/api/lifecycle.py) is given, with the Prometheus recorder over the
catalogue of cortex/metrics.py and the one that records nothing, used with
`--no-metrics` (for measuring what recording costs). One choice, made once
when the app is built, instead of a check of a flag at every record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cortex import metrics

Observe = Callable[[float], None]


class Recorder(Protocol):
    def started(self, api: str, model: str) -> None:
        """A request dispatched, waiting for its first output."""

    def first_output(self, api: str, model: str, seconds: float) -> None: ...

    def inter_token(self, api: str, model: str) -> Observe:
        """What observes the gaps between one request's outputs, looked up
        once per request: it runs for every token."""

    def finished(
        self,
        api: str,
        model: str,
        outcome: str,
        seconds: float,
        tokens: tuple[int, int],
        had_output: bool,
    ) -> None:
        """A dispatched request ended; `tokens`: prompt and output tokens."""

    def rejected(self, api: str, model: str, outcome: str) -> None:
        """A request that failed before it was dispatched."""


class PrometheusRecorder:
    def started(self, api: str, model: str) -> None:
        metrics.IN_FLIGHT.labels(model).inc()
        metrics.QUEUED.labels(model).inc()

    def first_output(self, api: str, model: str, seconds: float) -> None:
        metrics.TIME_TO_FIRST_TOKEN.labels(api, model).observe(seconds)
        metrics.QUEUED.labels(model).dec()

    def inter_token(self, api: str, model: str) -> Observe:
        # The child, not a labels() lookup (a lock and a dict) per token:
        # that made each token cost 1.3 us instead of 0.6 us.
        return metrics.INTER_TOKEN_LATENCY.labels(api, model).observe

    def finished(
        self,
        api: str,
        model: str,
        outcome: str,
        seconds: float,
        tokens: tuple[int, int],
        had_output: bool,
    ) -> None:
        if not had_output:
            metrics.QUEUED.labels(model).dec()
        metrics.IN_FLIGHT.labels(model).dec()
        metrics.REQUESTS.labels(api, model, outcome).inc()
        metrics.REQUEST_DURATION.labels(api, model).observe(seconds)
        prompt, output = tokens
        if prompt:
            metrics.PROMPT_TOKENS.labels(api, model).inc(prompt)
        if output:
            metrics.OUTPUT_TOKENS.labels(api, model).inc(output)

    def rejected(self, api: str, model: str, outcome: str) -> None:
        metrics.REQUESTS.labels(api, model, outcome).inc()


def _ignore(seconds: float) -> None:
    pass


class NoRecorder:
    def started(self, api: str, model: str) -> None:
        pass

    def first_output(self, api: str, model: str, seconds: float) -> None:
        pass

    def inter_token(self, api: str, model: str) -> Observe:
        return _ignore

    def finished(
        self,
        api: str,
        model: str,
        outcome: str,
        seconds: float,
        tokens: tuple[int, int],
        had_output: bool,
    ) -> None:
        pass

    def rejected(self, api: str, model: str, outcome: str) -> None:
        pass


def recorder_for(enabled: bool) -> Recorder:
    return PrometheusRecorder() if enabled else NoRecorder()
