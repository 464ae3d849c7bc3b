"""A batch line through its endpoint's own handler, in-process, on the
scripted pool: the answer a client would have had (status, body, request
id), a body the endpoint refuses (400 naming the field), an error of the
request path (404 for an unknown model), and a line refused for want of
capacity tried again until it is answered."""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from axon.errors import ModelOverloadedError
from axon.v1 import neuron_pb2 as pb
from cortex.api.batches.line_run import run_line
from cortex.api.batches.lines import BatchLine
from cortex.app import create_app
from cortex.auth.principal import ANONYMOUS, Principal
from cortex.config import CortexSettings, StoreSettings
from cortex.routing.policy import RouteHints
from tests.unit.cortex.api.fakes import Script, ScriptedPool

CHAT = "/v1/chat/completions"
DONE = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, text="hi", finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=2, completion_tokens=1),
)


class FlakyPool(ScriptedPool):
    """Overloaded for the first `refusals` requests, then the script."""

    def __init__(self, script: Script, refusals: int) -> None:
        super().__init__(script)
        self.refusals = refusals

    async def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None = None
    ) -> AsyncIterator[pb.GenerateResponse]:
        if self.refusals > 0:
            self.refusals -= 1
            raise ModelOverloadedError("busy")
        async for message in super().generate(request):
            yield message


def _app(pool: ScriptedPool) -> FastAPI:
    state = Path(tempfile.mkdtemp(prefix="neuraxis-test-"))
    return create_app(CortexSettings(store=StoreSettings(state_dir=state)), pool=pool)


def _chat(model: str = "m", **extra: object) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


async def test_a_line_gets_the_answer_a_client_would() -> None:
    pool = ScriptedPool([DONE])
    result = await run_line(_app(pool), CHAT, ANONYMOUS, BatchLine(1, "a", _chat()))
    line = json.loads(result.line)
    assert result.ok and line["custom_id"] == "a" and line["error"] is None
    response = line["response"]
    assert response["status_code"] == 200 and response["request_id"].startswith("chatcmpl-")
    assert response["body"]["choices"][0]["message"]["content"] == "hi"
    assert response["body"]["usage"]["prompt_tokens"] == 2
    assert pool.requests[0].request_id == response["request_id"]


async def test_a_body_the_endpoint_refuses_is_its_400() -> None:
    pool = ScriptedPool([DONE])
    line = BatchLine(1, "a", _chat(temperature="hot"))
    result = await run_line(_app(pool), CHAT, ANONYMOUS, line)
    response = json.loads(result.line)["response"]
    assert not result.ok and response["status_code"] == 400
    assert response["body"]["error"]["param"] == "temperature"
    assert pool.requests == []


async def test_the_keys_models_apply() -> None:
    pool = ScriptedPool([DONE])
    only_e = Principal(tenant="t", key_id="k", models=frozenset({"e"}))
    result = await run_line(_app(pool), CHAT, only_e, BatchLine(1, "a", _chat()))
    response = json.loads(result.line)["response"]
    assert response["status_code"] == 404
    assert response["body"]["error"]["code"] == "model_not_found"


async def test_a_line_refused_for_capacity_is_tried_again() -> None:
    pool = FlakyPool([DONE], refusals=3)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    line = BatchLine(1, "a", _chat())
    result = await run_line(_app(pool), CHAT, ANONYMOUS, line, sleep=sleep)
    assert result.ok and pool.refusals == 0 and len(pool.requests) == 1
    assert waits == [0.25, 0.5, 1.0]  # backing off


async def test_a_line_runs_in_the_batch_class_whatever_it_asks() -> None:
    pool = ScriptedPool([DONE])
    line = BatchLine(1, "a", _chat(priority=-1, service_tier="priority"))
    result = await run_line(_app(pool), CHAT, ANONYMOUS, line)
    assert result.ok
    assert pool.requests[0].priority == pb.PRIORITY_CLASS_BATCH
