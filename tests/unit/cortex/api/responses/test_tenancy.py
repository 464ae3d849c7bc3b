"""Stored responses belong to the tenant whose key made them: every other
tenant gets the 404 of an id that does not exist, on every route."""

from __future__ import annotations

from typing import Any

from axon.v1 import neuron_pb2 as pb
from cortex.auth.keys import KeyRequest
from tests.unit.cortex.api.fakes import auth_client

HI = pb.GenerateResponse(choices=[pb.ChoiceDelta(index=0, text="Hi")])
END = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=3, completion_tokens=1),
)


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_every_route_hides_another_tenants_response() -> None:
    c, _, (mine, theirs) = auth_client(
        [HI, END], KeyRequest("owner", []), KeyRequest("intruder", [])
    )
    made = c.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=_bearer(mine))
    assert made.status_code == 200
    rid = made.json()["id"]

    def both(method: str, path: str, body: dict[str, Any] | None = None) -> None:
        real = c.request(method, path.format(rid), json=body, headers=_bearer(theirs))
        fake = c.request(method, path.format("resp_nope"), json=body, headers=_bearer(theirs))
        assert real.status_code == fake.status_code == 404, (path, real.text)
        assert real.json()["error"]["message"].replace(rid, "X") == fake.json()["error"][
            "message"
        ].replace("resp_nope", "X")

    both("GET", "/v1/responses/{}")
    both("GET", "/v1/responses/{}?stream=true")
    both("GET", "/v1/responses/{}/input_items")
    both("POST", "/v1/responses/{}/cancel")
    both("DELETE", "/v1/responses/{}")
    chained = {"model": "m", "input": "more", "previous_response_id": "{}"}
    real = c.post(
        "/v1/responses", json={**chained, "previous_response_id": rid}, headers=_bearer(theirs)
    )
    assert real.status_code == 404
    assert real.json()["error"]["param"] == "previous_response_id"

    # Still all there for its owner.
    assert c.get(f"/v1/responses/{rid}", headers=_bearer(mine)).status_code == 200
    again = c.post(
        "/v1/responses", json={**chained, "previous_response_id": rid}, headers=_bearer(mine)
    )
    assert again.status_code == 200
    assert c.delete(f"/v1/responses/{rid}", headers=_bearer(mine)).status_code == 200
