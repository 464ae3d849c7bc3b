"""The /v1 route class (cortex/api/route.py), in-process with keys: the
Responses routes without a body count toward a key's rpm and
max_concurrent (issue 31 point 6), and hold their slot only while they run."""

from __future__ import annotations

from axon.v1 import neuron_pb2 as pb
from cortex.auth.keys import KeyRequest
from tests.unit.cortex.api.fakes import auth_client

DONE = pb.GenerateResponse(
    choices=[pb.ChoiceDelta(index=0, text="ok", finish_reason=pb.FINISH_REASON_STOP)],
    usage=pb.Usage(prompt_tokens=1, completion_tokens=1),
)


def test_reads_replays_and_deletes_count_toward_rpm() -> None:
    client, _, (key,) = auth_client([DONE], KeyRequest("t", [], rpm=4))
    headers = {"Authorization": f"Bearer {key}"}
    with client:
        created = client.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=headers)
        assert created.status_code == 200, created.text
        path = f"/v1/responses/{created.json()['id']}"
        assert client.get(path, headers=headers).status_code == 200
        assert client.get(path + "?stream=true", headers=headers).status_code == 200
        assert client.delete(path, headers=headers).status_code == 200
        refused = client.get(path, headers=headers)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"


def test_a_read_frees_its_concurrency_slot_when_answered() -> None:
    client, _, (key,) = auth_client([DONE], KeyRequest("t", [], max_concurrent=1))
    headers = {"Authorization": f"Bearer {key}"}
    with client:
        created = client.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=headers)
        path = f"/v1/responses/{created.json()['id']}"
        for _ in range(3):  # each one's slot is free again for the next
            assert client.get(path + "?stream=true", headers=headers).status_code == 200
            read = client.get(path, headers=headers)
            assert read.status_code == 200, read.text
            assert read.headers["x-ratelimit-remaining-concurrent-requests"] == "0"
