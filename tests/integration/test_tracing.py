"""OpenTelemetry traces end to end: cortex and two sim neurons export to a
real OTLP/gRPC receiver process (harness/otlp_receiver.py), one neuron
failing every request before its first token so that a request routed to
it first is retried on the other. One streamed chat request's trace is
read back with cortex's and the neurons' spans in their parent/child
order; its log lines and its latency exemplar carry its trace id."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.gateway import Sim, SimGateway, sim_gateway
from harness.otlp_receiver import ReceivedSpan, Receiver, otlp_receiver, trace_of
from harness.polling import wait_until

CHAT = "/v1/chat/completions"
# Spans leave each process in batches: every 100 ms here instead of 5 s.
BATCH_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "100"}


@pytest.fixture(scope="module")
def traced(logs_dir: Path) -> Iterator[tuple[SimGateway, Receiver]]:
    with pytest.MonkeyPatch.context() as env, otlp_receiver(logs_dir, "tracing") as receiver:
        for name, value in BATCH_ENV.items():
            env.setenv(name, value)
        otlp = ["--otlp-endpoint", receiver.endpoint]
        sims = [
            Sim("sim-model", [*otlp, "--sim-fail-after-tokens", "0"]),
            Sim("sim-model", otlp),
        ]
        # Ties taken in turn, never ejected: the failing neuron is tried
        # first by one request of every two.
        flags = [*otlp, "--routing", "least_outstanding", "--ejection-consecutive-failures", "1000"]
        # sim_gateway yields once both neurons are in rotation: with only the
        # failing one, a request would have nowhere to be retried.
        with sim_gateway(logs_dir, "tracing", *flags, sims=sims) as gateway:
            yield gateway, receiver


def _streamed_chat(base_url: str, traceparent: str) -> str:
    """A streamed chat request under the client's `traceparent`; its text."""
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
    }
    text = []
    with httpx.stream(
        "POST", base_url + CHAT, json=body, headers={"traceparent": traceparent}, timeout=30
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text.append(choice["delta"].get("content") or "")
    return "".join(text)


def _retried(spans: list[ReceivedSpan]) -> bool:
    """Both attempts and the neurons' spans of the answered one are in."""
    names = [s.name for s in spans]
    return names.count("neuraxis.attempt") == 2 and "neuron.decode" in names


def test_a_retried_stream_is_one_trace_from_client_to_engine(
    traced: tuple[SimGateway, Receiver],
) -> None:
    gateway, receiver = traced
    client_span = secrets.token_hex(8)
    sent: list[str] = []
    # Ties rotate between the two neurons: within two requests one goes to
    # the failing neuron first.
    for _ in range(4):
        trace_id = secrets.token_hex(16)
        sent.append(trace_id)
        assert _streamed_chat(gateway.base_url, f"00-{trace_id}-{client_span}-01") == (
            "tok0 tok1 tok2 tok3"
        )

    def retried_trace() -> list[ReceivedSpan] | None:
        spans = receiver.spans()
        for trace_id in sent:
            mine = trace_of(spans, trace_id)
            if _retried(mine):
                return mine
        return None

    assert wait_until(lambda: retried_trace() is not None, timeout_s=60), (
        "no trace with a retry arrived; received: "
        + ", ".join(sorted({s.name for s in receiver.spans()}))
    )
    spans = retried_trace()
    assert spans is not None
    by_id = {s.span_id: s for s in spans}

    def children(parent: ReceivedSpan, name: str) -> list[ReceivedSpan]:
        return [s for s in spans if s.parent_id == parent.span_id and s.name == name]

    # cortex's request span continues the client's traceparent.
    [http] = [s for s in spans if s.name == f"POST {CHAT}"]
    assert (http.service, http.parent_id) == ("neuraxis-cortex", client_span)
    assert http.attributes["gen_ai.operation.name"] == "chat"
    assert http.attributes["http.response.status_code"] == 200
    for name in ("neuraxis.authenticate", "neuraxis.admission"):
        assert len(children(http, name)) == 1, name
    routes = children(http, "neuraxis.route")
    assert [r.attributes["neuraxis.attempt"] for r in routes] == [0, 1]
    assert {r.attributes["neuraxis.routing.policy"] for r in routes} == {"least_outstanding"}
    assert {r.attributes["neuraxis.routing.decision"] for r in routes} == {"balanced"}
    first, retry = children(http, "neuraxis.attempt")
    assert (first.error, retry.error) == (True, False)
    assert first.end_ns <= retry.start_ns
    assert "first_message" in retry.events
    assert first.attributes["neuraxis.neuron"] != retry.attributes["neuraxis.neuron"]
    assert [r.attributes["neuraxis.routing.neuron"] for r in routes] == [
        first.attributes["neuraxis.neuron"],
        retry.attributes["neuraxis.neuron"],
    ]

    # Each attempt's neuron continued it: the failed one too.
    [failed_call] = children(first, "neuron.generate")
    [call] = children(retry, "neuron.generate")
    assert (failed_call.service, call.service) == ("neuraxis-neuron", "neuraxis-neuron")
    assert failed_call.error and not call.error
    [prepare] = children(call, "neuron.prepare")
    [queue] = children(call, "neuron.queue")
    [decode] = children(call, "neuron.decode")
    assert prepare.end_ns <= queue.start_ns <= queue.end_ns <= decode.start_ns
    # (The attempt ends when cortex closes the neuron's stream, which may be
    # just after the answer's last byte went out: not compared with http's.)
    assert decode.end_ns <= call.end_ns <= min(retry.end_ns, http.end_ns)
    assert call.events == ("first_token", "finish")
    assert call.attributes["gen_ai.usage.output_tokens"] == 4
    assert call.attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert all(s.parent_id in by_id or s is http for s in spans)

    # The request's log lines carry its trace id, on both sides.
    trace_id = http.trace_id
    cortex_log = gateway.cortex.proc.log_path.read_text()
    assert f'"trace_id": "{trace_id}"' in cortex_log
    neuron_logs = "".join(n.proc.log_path.read_text() for n in gateway.neurons)
    assert f'"trace_id": "{trace_id}"' in neuron_logs


def test_latency_histograms_carry_trace_ids_as_exemplars(
    traced: tuple[SimGateway, Receiver],
) -> None:
    gateway, _ = traced
    trace_id = secrets.token_hex(16)
    _streamed_chat(gateway.base_url, f"00-{trace_id}-{secrets.token_hex(8)}-01")
    openmetrics = httpx.get(
        gateway.admin_url + "/metrics",
        headers={"accept": "application/openmetrics-text; version=1.0.0"},
        timeout=10,
    )
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    exemplars = [
        line
        for line in openmetrics.text.splitlines()
        if line.startswith("neuraxis_time_to_first_token_seconds_bucket") and " # {" in line
    ]
    assert any(f'trace_id="{trace_id}"' in line for line in exemplars), exemplars
    # A scraper that asks for the text format gets it as before.
    text = httpx.get(gateway.admin_url + "/metrics", timeout=10)
    assert text.headers["content-type"].startswith("text/plain")
    assert " # {" not in text.text


def test_a_tokenize_call_is_traced_into_the_neuron(traced: tuple[SimGateway, Receiver]) -> None:
    """Unary calls carry their attempt's trace context too: the neuron's
    Tokenize span is the attempt's child, and admission says whose it is."""
    gateway, receiver = traced
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    answer = httpx.post(
        gateway.base_url + "/tokenize",
        json={"model": "sim-model", "prompt": "hi"},
        headers={"traceparent": f"00-{trace_id}-{client_span}-01"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text

    def arrived() -> list[ReceivedSpan]:
        # cortex's and the neuron's exporters send apart: the neuron's span
        # came first once, before cortex's attempt span.
        mine = trace_of(receiver.spans(), trace_id)
        names = {s.name for s in mine}
        wanted = {"neuron.tokenize", "neuraxis.attempt", "neuraxis.admission"}
        return mine if wanted <= names else []

    assert wait_until(lambda: bool(arrived()), timeout_s=60), "the tokenize trace never arrived"
    spans = arrived()
    [attempt] = [s for s in spans if s.name == "neuraxis.attempt"]
    [call] = [s for s in spans if s.name == "neuron.tokenize"]
    assert (call.parent_id, call.service) == (attempt.span_id, "neuraxis-neuron")
    assert call.attributes["gen_ai.request.model"] == "sim-model"
    [admission] = [s for s in spans if s.name == "neuraxis.admission"]
    assert admission.attributes["neuraxis.priority"] == "default"
    assert "neuraxis.tenant" in admission.attributes


def test_a_trace_sampled_out_leaves_no_span_on_either_side(
    traced: tuple[SimGateway, Receiver],
) -> None:
    """A client's traceparent that says not sampled is followed by cortex
    and, through the attempt's metadata, by the neuron: neither exports a
    span of it. A sampled request sent after it shows the exports are in."""
    gateway, receiver = traced
    unsampled, sampled = secrets.token_hex(16), secrets.token_hex(16)
    for trace_id, flags in ((unsampled, "00"), (sampled, "01")):
        traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-{flags}"
        assert _streamed_chat(gateway.base_url, traceparent) == "tok0 tok1 tok2 tok3"

    def arrived() -> bool:
        names = {s.name for s in trace_of(receiver.spans(), sampled)}
        return {f"POST {CHAT}", "neuron.decode"} <= names

    # Each process exports its spans in the order they ended.
    assert wait_until(arrived, timeout_s=60), "the sampled request's spans did not arrive"
    assert trace_of(receiver.spans(), unsampled) == []
