"""Tracing on, into memory, for the unit tests that check spans."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from axon import tracing


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on (every trace recorded) for one test; its finished spans."""
    exporter = InMemorySpanExporter()
    tracing.install("neuraxis-test", 1.0, SimpleSpanProcessor(exporter))
    yield exporter
    tracing.shutdown()
