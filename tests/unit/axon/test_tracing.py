from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from axon import tracing
from axon.tracing import TraceIdFilter, TraceSettings, http_traces_url
from tests.unit.traced import spans

__all__ = ["spans"]


def test_off_by_default_and_nothing_is_made() -> None:
    assert not tracing.configure("neuraxis-test", TraceSettings())
    assert not tracing.enabled()
    assert tracing.span("a") is tracing.span("b")  # one shared no-op
    with tracing.span("a") as current:
        assert current is None
    assert tracing.start("a") is None
    assert tracing.metadata_for(None) == ()
    assert tracing.current_trace_id() is None
    assert tracing.extract({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}) is None


def test_the_http_exporter_gets_the_traces_path_when_the_url_has_none() -> None:
    assert http_traces_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert http_traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert http_traces_url("http://c:4318/custom/traces") == "http://c:4318/custom/traces"


def test_a_client_traceparent_is_continued_and_passed_on(spans: InMemorySpanExporter) -> None:
    client_trace, client_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    parent = tracing.extract({"traceparent": f"00-{client_trace}-{client_span}-01"})
    with tracing.span("request", parent=parent) as request:
        assert tracing.current_trace_id() == client_trace
        attempt = tracing.start("attempt", {"n": 1})
        metadata = dict(tracing.metadata_for(attempt))
        tracing.end(attempt, RuntimeError("failed"))
    assert request is not None and attempt is not None
    span_id = format(attempt.get_span_context().span_id, "016x")
    assert metadata == {"traceparent": f"00-{client_trace}-{span_id}-01"}
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert finished["request"].parent is not None
    assert format(finished["request"].parent.span_id, "016x") == client_span
    assert finished["attempt"].parent == finished["request"].context
    assert not finished["attempt"].status.is_ok
    assert finished["attempt"].attributes == {"n": 1, "error.type": "RuntimeError"}


def test_log_lines_carry_the_trace_id_of_a_recorded_span(spans: InMemorySpanExporter) -> None:
    record = logging.makeLogRecord({"msg": "x", "request_id": "chat-1"})
    assert TraceIdFilter().filter(record) and "trace_id" not in vars(record)
    with tracing.span("request"):
        TraceIdFilter().filter(record)
        assert vars(record)["trace_id"] == tracing.current_trace_id()


def test_a_trace_sampled_out_has_no_trace_id_nor_children() -> None:
    exporter = InMemorySpanExporter()
    tracing.install("neuraxis-test", 0.0, SimpleSpanProcessor(exporter))
    try:
        with tracing.span("request") as current:
            assert current is not None and not current.is_recording()
            assert tracing.current_trace_id() is None
            # Its children are not made, and the callee hears it was sampled out.
            assert tracing.span("child") is tracing.span("other")
            assert tracing.start("attempt") is None
            [(key, value)] = tracing.metadata_for(None)
            assert key == "traceparent" and not int(value[-2:], 16) & 1  # not sampled
    finally:
        tracing.shutdown()
    assert exporter.get_finished_spans() == ()


def test_with_tracing_off_the_services_never_import_opentelemetry() -> None:
    code = (
        "import sys, tempfile, cortex.app, cortex.main, neuron.server, neuron.main\n"
        "from cortex.config import CortexSettings, StoreSettings\n"
        "from cortex.app import create_app\n"
        "store = StoreSettings(state_dir=tempfile.mkdtemp())\n"
        "create_app(CortexSettings(neurons=['127.0.0.1:1'], plaintext=True, store=store))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_trace_context_is_picked_from_headers_and_metadata() -> None:
    traceparent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    headers = [
        (b"host", b"cortex"),
        (b"traceparent", traceparent.encode()),
        (b"tracestate", b"a=1"),
    ]
    assert tracing.carrier_of_headers(headers) == {"traceparent": traceparent, "tracestate": "a=1"}
    assert tracing.carrier_of_headers([(b"host", b"cortex")]) == {}
    metadata = [("user-agent", "grpc"), ("traceparent", traceparent)]
    assert tracing.carrier_of_metadata(metadata) == {"traceparent": traceparent}


@pytest.mark.parametrize(
    ("traceparent", "sampled_out"),
    [
        ("00-" + "1" * 32 + "-" + "2" * 16 + "-00", True),
        ("00-" + "1" * 32 + "-" + "2" * 16 + "-02", True),  # a flag other than sampled
        ("00-" + "1" * 32 + "-" + "2" * 16 + "-01", False),
        ("00-" + "1" * 32 + "-" + "2" * 16 + "-03", False),
        ("00-" + "1" * 32 + "-" + "2" * 16 + "-zz", False),  # malformed: the SDK decides
        ("00-" + "1" * 31 + "-" + "2" * 16 + "-00", False),
        (None, False),  # no caller's trace: the ratio decides
    ],
)
def test_a_callers_traceparent_says_whether_its_trace_is_sampled_out(
    traceparent: str | None, sampled_out: bool
) -> None:
    carrier = {} if traceparent is None else {"traceparent": traceparent}
    assert tracing.sampled_out(carrier) is sampled_out


def test_a_callers_unsampled_trace_gives_a_span_that_records_nothing(
    spans: InMemorySpanExporter,
) -> None:
    """What `sampled_out` reads from the flags is what the sampler decides."""
    for flags, recorded in (("00", False), ("01", True)):
        carrier = {"traceparent": f"00-{'1' * 32}-{'2' * 16}-{flags}"}
        span = tracing.server_span("request", carrier)
        assert span.is_recording() is recorded is not tracing.sampled_out(carrier)
        token = tracing.attach(span)
        assert tracing.current_trace_id() == ("1" * 32 if recorded else None)
        tracing.detach(token)
        span.end()
    assert [s.name for s in spans.get_finished_spans()] == ["request"]


def test_the_metadata_is_what_the_w3c_propagator_writes(spans: InMemorySpanExporter) -> None:
    from opentelemetry import propagate, trace

    client = f"00-{'1' * 32}-{'2' * 16}-01"
    for carrier in ({"traceparent": client}, {"traceparent": client, "tracestate": "a=1,b=2"}):
        with tracing.span("request", parent=tracing.extract(carrier)) as request:
            attempt = tracing.start("attempt")
            for span in (attempt, None):
                written: dict[str, str] = {}
                current = trace.set_span_in_context(span or trace.get_current_span())
                propagate.inject(written, context=current)
                assert dict(tracing.metadata_for(span)) == written
            tracing.end(attempt)
        assert request is not None
