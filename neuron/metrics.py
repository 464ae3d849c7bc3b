"""The neuron's own Prometheus metrics (its gRPC requests), declared in one
place, and the HTTP endpoint that exports them beside vLLM's engine metrics
(vLLM registers those on the same default registry: vllm:num_requests_running,
vllm:kv_cache_usage_perc, vllm:time_to_first_token_seconds, ...).

Labels: method (a gRPC method name), code (a gRPC status name), model (the
served model, or "unknown"), adapter (a LoRA adapter of the neuron's
catalogue). Which replica, model and GPU generation a series comes from is
added by Prometheus from service discovery (cortex's /sd/neurons), so the
engine's metrics carry them too.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Histogram,
    generate_latest,
)

GRPC_REQUESTS = Counter(
    "neuraxis_neuron_grpc_requests",
    "gRPC calls handled by the neuron, by final status.",
    ["method", "model", "code"],
)
GRPC_DURATION = Histogram(
    "neuraxis_neuron_grpc_request_duration_seconds",
    "Duration of gRPC calls handled by the neuron.",
    ["method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160),
)


def record_call(method: str, model: str, code: str, seconds: float) -> None:
    GRPC_REQUESTS.labels(method, model, code).inc()
    GRPC_DURATION.labels(method).observe(seconds)


ADAPTER_LOADS = Counter(
    "neuraxis_neuron_adapter_loads",
    "LoRA adapters loaded onto the engine (on demand or by LoadAdapter).",
    ["adapter"],
)
ADAPTER_EVICTIONS = Counter(
    "neuraxis_neuron_adapter_evictions",
    "LoRA adapters taken off the engine (to make room, or by UnloadAdapter).",
    ["adapter"],
)


def record_adapter_load(adapter: str) -> None:
    ADAPTER_LOADS.labels(adapter).inc()


def record_adapter_eviction(adapter: str) -> None:
    ADAPTER_EVICTIONS.labels(adapter).inc()


class _MetricsHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        # Always the classic text format: prometheus_client's OpenMetrics output
        # (which Prometheus 2.x asks for) escapes "vllm:num_requests_running" to
        # "vllm_num_requests_running", and vLLM's documented names would not match.
        body = generate_latest(REGISTRY)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per scrape is noise


def serve_metrics(host: str, port: int) -> None:
    """Export the default registry over HTTP in a background thread."""
    try:
        server = ThreadingHTTPServer((host, port), _MetricsHandler)
    except OSError as e:
        raise SystemExit(
            f"neuron: cannot serve metrics on {host}:{port} ({e.strerror}); "
            "choose another --metrics-port, or 0 for none"
        ) from None
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
