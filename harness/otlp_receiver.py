"""A real OTLP/gRPC trace receiver for the tests and benchmarks: the
collector's TraceService (`opentelemetry.proto.collector.trace.v1`) served
with grpcio, in a process of its own, writing every span it receives as one
JSON line to a file. What cortex, the neurons and vLLM export reaches it as
it would reach an OpenTelemetry collector.

    python -m harness.otlp_receiver --port 4317 --out spans.jsonl

`otlp_receiver(logs)` starts one on a free port; `read_spans` reads the file
back into `ReceivedSpan`s, and `trace_of` picks one trace's spans.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from axon.process import stop_process_group
from harness.ports import free_port
from harness.procs import REPO, child_env


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    name: str
    service: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[str, ...] = ()
    error: bool = False


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _spans(request: Any) -> Iterator[dict[str, Any]]:
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "service": service,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "attributes": {a.key: _value(a.value) for a in span.attributes},
                    "events": [e.name for e in span.events],
                    "error": span.status.code == 2,  # STATUS_CODE_ERROR
                }


def serve(port: int, out: Path) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import (
        trace_service_pb2,
        trace_service_pb2_grpc,
    )

    lock = threading.Lock()
    sink = out.open("a", encoding="utf-8")

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method)
            lines = [json.dumps(span) + "\n" for span in _spans(request)]
            with lock:
                sink.writelines(lines)
                sink.flush()
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)  # type: ignore[no-untyped-call]
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        raise SystemExit(f"otlp_receiver: cannot listen on port {port}")
    server.start()
    print(f"otlp_receiver: listening on 127.0.0.1:{port}, spans to {out}", flush=True)
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    server.stop(grace=1.0)
    sink.close()


@dataclass(frozen=True)
class Receiver:
    proc: subprocess.Popen[bytes]
    port: int
    out: Path

    @property
    def endpoint(self) -> str:
        """The URL cortex's and the neuron's `--otlp-endpoint` take."""
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[ReceivedSpan]:
        return read_spans(self.out)


@contextmanager
def otlp_receiver(logs: Path, name: str = "otlp") -> Iterator[Receiver]:
    """A receiver on a free port, writing to `<logs>/<name>-spans.jsonl`;
    stopped at the end."""
    port = free_port()
    out = logs / f"{name}-spans.jsonl"
    out.touch()
    command = [sys.executable, "-m", "harness.otlp_receiver", "--port", str(port)]
    with (logs / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(
            [*command, "--out", str(out)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(),
            cwd=REPO,
            start_new_session=True,
        )
    try:
        yield Receiver(proc, port, out)
    finally:
        stop_process_group(proc, signal.SIGTERM, 10)


def read_spans(path: Path) -> list[ReceivedSpan]:
    spans = []
    for line in path.read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        raw["events"] = tuple(raw["events"])
        spans.append(ReceivedSpan(**raw))
    return spans


def trace_of(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return sorted((s for s in spans if s.trace_id == trace_id), key=lambda s: s.start_ns)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    serve(args.port, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
