"""The routing benchmark's client: a stream that ends with an error event is
counted as failed, not a crash of the whole run."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from harness.routing_workload import Shape, conversations, run_workload

SHAPE = Shape(groups=1, users_per_group=2, turns=2, prefix_words=3, max_tokens=2, concurrency=2)


def _transport(fail_every: int) -> httpx.MockTransport:
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] % fail_every == 0:
            body = 'data: {"error": {"message": "neuron lost", "type": "server_error", '
            body += '"code": "unavailable"}}\n\n'
        else:
            body = (
                'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
                'data: {"choices": [], "usage": {"completion_tokens": 1}}\n\n'
                "data: [DONE]\n\n"
            )
        return httpx.Response(200, content=body.encode())

    return httpx.MockTransport(handler)


def test_error_events_are_counted_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    real = httpx.AsyncClient

    def client(**kwargs: object) -> httpx.AsyncClient:
        return real(transport=_transport(fail_every=2))

    monkeypatch.setattr(httpx, "AsyncClient", client)
    samples, _ = asyncio.run(run_workload("http://x", conversations(SHAPE, 1), SHAPE))
    assert len(samples) == 4
    assert sum(s.failed for s in samples) == 2
    assert [s.error for s in samples if s.failed] == ["unavailable", "unavailable"]
    assert all(s.output_tokens == 1 for s in samples if not s.failed)
