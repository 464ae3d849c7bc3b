"""The recorders: Prometheus records a request's life, dropped tools and
the store's work into the catalogue's series; the one used with
--no-metrics records nothing."""

from __future__ import annotations

from prometheus_client import REGISTRY

from cortex.recording import Ended, NoRecorder, PrometheusRecorder, recorder_for


def _value(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _life(recorder: PrometheusRecorder | NoRecorder, model: str) -> None:
    recorder.started("chat", model)
    recorder.first_output("chat", model, 0.01)
    recorder.inter_token("chat", model)(0.002)
    recorder.finished(Ended("chat", model, "success", 0.5, 3, 2, had_output=True))
    recorder.rejected("chat", model, "client_error")
    recorder.dropped_tool("chat", model)  # the model's name as the tool type: a series of its own
    backend = f"store-{model}"
    recorder.store_write(backend, 0.001)
    recorder.store_error(backend, "put")
    recorder.purged(backend, 4)
    recorder.lease_expired(backend)


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
    assert _value("neuraxis_dropped_tools_total", {"api": "chat", "type": model}) == 1
    store = {"backend": f"store-{model}"}
    assert _value("neuraxis_stored_responses_total", store) == 1
    assert _value("neuraxis_store_write_seconds_count", store) == 1
    assert _value("neuraxis_store_errors_total", store | {"op": "put"}) == 1
    assert _value("neuraxis_responses_purged_total", store) == 4
    assert _value("neuraxis_responses_lease_expired_total", store) == 1


def test_a_request_that_ends_before_any_output_leaves_the_queue() -> None:
    recorder, model = PrometheusRecorder(), "rec-queued"
    recorder.started("chat", model)
    assert _value("neuraxis_requests_queued", {"model": model}) == 1
    recorder.finished(Ended("chat", model, "cancelled", 0.1, 0, 0, had_output=False))
    assert _value("neuraxis_requests_queued", {"model": model}) == 0
    assert _value("neuraxis_requests_in_flight", {"model": model}) == 0


def test_no_metrics_records_nothing() -> None:
    model = "rec-off"
    _life(NoRecorder(), model)
    api = {"api": "chat", "model": model}
    assert _value("neuraxis_requests_total", api | {"outcome": "success"}) == 0
    assert _value("neuraxis_request_duration_seconds_count", api) == 0
    assert _value("neuraxis_stored_responses_total", {"backend": f"store-{model}"}) == 0
    assert _value("neuraxis_responses_purged_total", {"backend": f"store-{model}"}) == 0


def test_the_setting_chooses_the_recorder() -> None:
    assert isinstance(recorder_for(True), PrometheusRecorder)
    assert isinstance(recorder_for(False), NoRecorder)
