"""cortex.metrics: with metrics turned off (--no-metrics), no routing metric
is recorded (the API's: tests/unit/cortex/test_recording.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from cortex import metrics


def _value(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def metrics_off() -> Iterator[None]:
    metrics.configure(False)
    yield
    metrics.configure(True)


def test_routing_and_retry_metrics_are_recorded_when_on() -> None:
    replica = {"model": "m-on", "replica": "10.0.0.1:1"}
    before = _value("neuraxis_routing_decisions_total", replica)
    metrics.record_routed("m-on", "10.0.0.1:1")
    metrics.record_retry("m-on", "10.0.0.1:1")
    assert _value("neuraxis_routing_decisions_total", replica) == before + 1
    assert _value("neuraxis_retries_total", replica) == 1


@pytest.mark.usefixtures("metrics_off")
def test_no_metrics_records_no_routing_or_retry_metrics() -> None:
    replica = {"model": "m-off", "replica": "10.0.0.2:1"}
    metrics.record_routed("m-off", "10.0.0.2:1")
    metrics.record_retry("m-off", "10.0.0.2:1")
    assert _value("neuraxis_routing_decisions_total", replica) == 0
    assert _value("neuraxis_retries_total", replica) == 0
