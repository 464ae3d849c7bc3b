"""Tracing on, into memory, for the unit tests that check spans."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from axon import tracing


@contextmanager
def traced_at(ratio: float) -> Iterator[InMemorySpanExporter]:
    """Tracing on, the traces started here sampled at `ratio`; the finished spans."""
    exporter = InMemorySpanExporter()
    tracing.install("neuraxis-test", ratio, SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        tracing.shutdown()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on (every trace recorded) for one test; its finished spans."""
    with traced_at(1.0) as exporter:
        yield exporter
