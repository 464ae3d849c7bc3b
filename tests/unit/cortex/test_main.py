"""cortex's server stopping with a stream open: the stream ends with its
terminal events (the error chunk, then [DONE]) before uvicorn's graceful
timeout, and nothing is logged as an exception. A real uvicorn server in
this process, in front of a pool whose stream never ends."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from axon.v1 import neuron_pb2 as pb
from cortex.app import create_app
from cortex.config import CortexSettings, StoreSettings
from cortex.main import Server
from cortex.routing.policy import RouteHints
from cortex.shutdown import Cutoff
from harness.ports import free_port
from tests.unit.cortex.api.fakes import ScriptedPool


class EndlessPool(ScriptedPool):
    """Stands in for NeuronPool: one token, then a stream that never ends."""

    def __init__(self) -> None:
        super().__init__([])
        self.streaming = asyncio.Event()

    async def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None = None
    ) -> AsyncIterator[pb.GenerateResponse]:
        yield pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="Once")])
        self.streaming.set()
        await asyncio.Event().wait()
        yield pb.GenerateResponse()


async def test_a_stream_open_at_shutdown_ends_with_its_terminal_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cutoff = Cutoff()
    monkeypatch.setattr("cortex.api.lifecycle.CUTOFF", cutoff)
    port = free_port()
    pool = EndlessPool()
    settings = CortexSettings(port=port, store=StoreSettings(state_dir=tmp_path))
    app = create_app(settings, pool=pool)
    grace = 4
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, timeout_graceful_shutdown=grace
    )
    server = Server(config, cutoff, cut_margin_s=3)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    lines: list[str] = []
    caplog.set_level(logging.INFO)
    async with (
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line:
                lines.append(line)
            if pool.streaming.is_set() and not server.should_exit:
                server.should_exit = True  # what SIGTERM does
                stopped_at = asyncio.get_running_loop().time()
    ended_at = asyncio.get_running_loop().time()
    await asyncio.wait_for(serving, timeout=grace + 5)

    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert error["code"] == "service_unavailable"
    assert "Once" in "".join(lines[:-2])
    assert ended_at - stopped_at < grace
    assert not [r for r in caplog.records if r.exc_info]
    assert not [r for r in caplog.records if "timeout graceful shutdown" in r.getMessage()]


def test_a_request_cancelled_at_the_timeout_is_one_warning_line() -> None:
    """What is left for uvicorn to cancel (the cutoff ends every stream
    before) is said in one line, without the CancelledError traceback."""
    import sys

    from cortex.main import _QuietCancel

    try:
        raise asyncio.CancelledError("Task cancelled, timeout graceful shutdown exceeded")
    except asyncio.CancelledError:
        exc_info = sys.exc_info()
    record = logging.makeLogRecord(
        {"name": "uvicorn.error", "levelno": logging.ERROR, "levelname": "ERROR"}
    )
    record.msg, record.exc_info = "Exception in ASGI application\n", exc_info
    assert _QuietCancel().filter(record)
    assert record.levelname == "WARNING" and not record.exc_info
    assert record.getMessage() == "a request was cancelled by the shutdown"
    other = logging.makeLogRecord({"msg": "Exception in ASGI application\n"})
    try:
        raise ValueError("a real bug")
    except ValueError:
        other.exc_info = sys.exc_info()
    assert _QuietCancel().filter(other)
    assert other.exc_info is not None
