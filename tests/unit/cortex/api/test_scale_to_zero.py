"""A model scaled to zero as the API shows it: listed in /v1/models with
its state, and the answer of a request that waited for its wake carrying
x-neuraxis-cold-start-ms (the pool's wait is cortex/routing/wake.py's,
tested in tests/unit/cortex/routing/test_pool_wake.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from axon.v1 import neuron_pb2 as pb
from cortex.app import create_app
from cortex.config import CortexSettings, StoreSettings
from cortex.routing.policy import RouteHints
from cortex.routing.wake import cold_start
from tests.unit.cortex.api.fakes import ScriptedPool

DONE = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, text="hi", finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=3, completion_tokens=1),
)


class WakingPool(ScriptedPool):
    """Model "z" sleeps; a request for it "waits" 1234 ms for its wake."""

    def sleeping_models(self) -> dict[str, bool]:
        return {"z": bool(self.requests)}

    async def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None = None
    ) -> AsyncIterator[pb.GenerateResponse]:
        holder = cold_start.get()
        if request.model == "z" and holder is not None:
            holder.ms = 1234
        async for message in super().generate(request, hints):
            yield message


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    settings = CortexSettings(store=StoreSettings(state_dir=tmp_path))
    return TestClient(create_app(settings, pool=WakingPool([DONE])))


def test_a_model_at_zero_stays_in_the_list_with_its_state(client: TestClient) -> None:
    with client:
        listed = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
        card = client.get("/v1/models/z").json()
    assert listed["z"]["state"] == "sleeping"
    assert "state" not in listed["m"]  # a served model's card is as it was
    assert card["id"] == "z" and card["state"] == "sleeping"


@pytest.mark.parametrize("stream", [False, True])
def test_the_request_that_waited_for_a_wake_carries_its_cold_start(
    client: TestClient, stream: bool
) -> None:
    body = {"model": "z", "messages": [{"role": "user", "content": "x"}], "stream": stream}
    with client:
        woken = client.post("/v1/chat/completions", json=body)
        served = client.post("/v1/chat/completions", json=body | {"model": "m"})
        state = client.get("/v1/models/z").json()["state"]
    assert woken.status_code == 200
    assert woken.headers["x-neuraxis-cold-start-ms"] == "1234"
    assert "x-neuraxis-cold-start-ms" not in served.headers
    assert state == "waking"
