"""The /v1 route class (cortex/api/route.py), in-process with keys: the
Responses routes without a body count toward a key's rpm and
max_concurrent (issue 31 point 6), and hold their slot only while they run."""

from __future__ import annotations

import json

from axon.v1 import neuron_pb2 as pb
from cortex.api.route import PARSE_INLINE_BYTES
from cortex.auth.keys import KeyRequest
from tests.unit.cortex.api.fakes import auth_client, client

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


JSON = {"content-type": "application/json"}


def _big_chat(messages: int, content: str = "hi") -> bytes:
    """A chat body over route.PARSE_INLINE_BYTES: parsed in a worker thread."""
    body = {"model": "m", "messages": [{"role": "user", "content": content}] * messages}
    encoded = json.dumps(body).encode()
    assert len(encoded) > PARSE_INLINE_BYTES
    return encoded


def test_a_large_body_is_parsed_off_the_loop_and_served() -> None:
    test_client, pool = client([DONE])
    with test_client:
        body = _big_chat(8, "word " * 4000)
        answer = test_client.post("/v1/chat/completions", content=body, headers=JSON)
        assert answer.status_code == 200, answer.text
        assert len(pool.requests[0].messages) == 8


def test_a_large_body_over_the_message_cap_is_refused_before_its_validation() -> None:
    test_client, pool = client([DONE])
    with test_client:
        answer = test_client.post("/v1/chat/completions", content=_big_chat(5000), headers=JSON)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == "messages" and "5000 messages or items" in error["message"]
        assert "at most 2048" in error["message"]
        assert pool.requests == []


def test_a_large_body_that_is_not_json_or_not_utf8_is_a_400() -> None:
    test_client, _ = client([DONE])
    with test_client:
        for body in (_big_chat(9000)[:-3], b'{"model": "\xff' + b"x" * 70_000 + b'"}'):
            answer = test_client.post("/v1/chat/completions", content=body, headers=JSON)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["type"] == "invalid_request_error"
