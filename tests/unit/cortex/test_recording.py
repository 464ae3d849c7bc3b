"""The recorders: Prometheus records a request's life into the catalogue's
series; the one used with --no-metrics records nothing."""

from __future__ import annotations

from prometheus_client import REGISTRY

from cortex.recording import NoRecorder, PrometheusRecorder, recorder_for


def _value(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _life(recorder: PrometheusRecorder | NoRecorder, model: str) -> None:
    recorder.started("chat", model)
    recorder.first_output("chat", model, 0.01)
    recorder.inter_token("chat", model)(0.002)
    recorder.finished("chat", model, "success", 0.5, (3, 2), had_output=True)
    recorder.rejected("chat", model, "client_error")


def test_prometheus_records_a_requests_life() -> None:
    model = "rec-on"
    _life(PrometheusRecorder(), model)
    api = {"api": "chat", "model": model}
    assert _value("neuraxis_requests_total", api | {"outcome": "success"}) == 1
    assert _value("neuraxis_requests_total", api | {"outcome": "client_error"}) == 1
    assert _value("neuraxis_time_to_first_token_seconds_count", api) == 1
    assert _value("neuraxis_inter_token_latency_seconds_count", api) == 1
    assert _value("neuraxis_prompt_tokens_total", api) == 3
    assert _value("neuraxis_output_tokens_total", api) == 2
    # In flight and queued went up and back down.
    assert _value("neuraxis_requests_in_flight", {"model": model}) == 0
    assert _value("neuraxis_requests_queued", {"model": model}) == 0


def test_a_request_that_ends_before_any_output_leaves_the_queue() -> None:
    recorder, model = PrometheusRecorder(), "rec-queued"
    recorder.started("chat", model)
    assert _value("neuraxis_requests_queued", {"model": model}) == 1
    recorder.finished("chat", model, "cancelled", 0.1, (0, 0), had_output=False)
    assert _value("neuraxis_requests_queued", {"model": model}) == 0
    assert _value("neuraxis_requests_in_flight", {"model": model}) == 0


def test_no_metrics_records_nothing() -> None:
    model = "rec-off"
    _life(NoRecorder(), model)
    api = {"api": "chat", "model": model}
    assert _value("neuraxis_requests_total", api | {"outcome": "success"}) == 0
    assert _value("neuraxis_request_duration_seconds_count", api) == 0


def test_the_setting_chooses_the_recorder() -> None:
    assert isinstance(recorder_for(True), PrometheusRecorder)
    assert isinstance(recorder_for(False), NoRecorder)
