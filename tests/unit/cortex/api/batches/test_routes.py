"""The Files and Batch routes on an app without its lifespan (no runner
takes the batches): OpenAI's shapes (read back by the pinned SDK's types),
the caps, pagination, another tenant's 404 and cancel."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from openai.types import Batch, FileDeleted, FileObject

from cortex.api.batches.settings import FilesSettings
from cortex.app import create_app
from cortex.config import CortexSettings, StoreSettings
from tests.unit.cortex.api.fakes import ScriptedPool

LINE = json.dumps(
    {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": "e", "input": "x"},
    }
)


@pytest.fixture(scope="module")
def client() -> TestClient:
    state = Path(tempfile.mkdtemp(prefix="neuraxis-test-"))
    files = FilesSettings(max_bytes=4096, max_lines=3, chunk_bytes=64)
    app = create_app(
        CortexSettings(store=StoreSettings(state_dir=state), files=files), ScriptedPool([])
    )
    return TestClient(app)  # no lifespan: nothing runs the batches


def _upload(client: TestClient, content: bytes, purpose: str = "batch") -> dict[str, object]:
    answer = client.post(
        "/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": purpose}
    )
    body: dict[str, object] = answer.json()
    body["status_code"] = answer.status_code
    return body


def test_a_file_goes_in_and_comes_out(client: TestClient) -> None:
    content = (LINE + "\n") * 2
    created = _upload(client, content.encode())
    assert created.pop("status_code") == 200
    file = FileObject.model_validate(created)
    assert (file.bytes, file.purpose, file.filename) == (len(content), "batch", "in.jsonl")
    assert FileObject.model_validate(client.get(f"/v1/files/{file.id}").json()) == file
    assert client.get(f"/v1/files/{file.id}/content").content == content.encode()
    listed = client.get("/v1/files", params={"purpose": "batch"}).json()
    assert file.id in [f["id"] for f in listed["data"]]
    deleted = FileDeleted.model_validate(client.delete(f"/v1/files/{file.id}").json())
    assert deleted.deleted and client.get(f"/v1/files/{file.id}").status_code == 404


@pytest.mark.parametrize(
    ("content", "purpose", "status"),
    [
        (b"x" * 4097, "batch", 413),  # past files.max_bytes
        (b"a\nb\nc\nd\n", "batch", 400),  # past files.max_lines
        (b"a\n", "fine-tune", 400),
    ],
)
def test_what_is_refused(client: TestClient, content: bytes, purpose: str, status: int) -> None:
    assert _upload(client, content, purpose)["status_code"] == status


def test_an_upload_past_the_routes_own_limit_is_413_at_the_edge(client: TestClient) -> None:
    # Past max_bytes plus the multipart allowance: the body limit answers.
    answer = client.post(
        "/v1/files", files={"file": ("in.jsonl", b"x" * 200_000)}, data={"purpose": "batch"}
    )
    assert answer.status_code == 413


def test_a_batch_is_created_listed_and_cancelled(client: TestClient) -> None:
    file_id = _upload(client, LINE.encode())["id"]
    made = []
    for i in range(3):
        body = {
            "input_file_id": file_id,
            "endpoint": "/v1/embeddings",
            "completion_window": "24h",
            "metadata": {"n": str(i)},
        }
        answer = client.post("/v1/batches", json=body)
        assert answer.status_code == 200, answer.text
        made.append(Batch.model_validate(answer.json()))
    assert made[0].status == "validating" and made[0].metadata == {"n": "0"}
    page = client.get("/v1/batches", params={"limit": 2}).json()
    assert [b["id"] for b in page["data"]] == [made[2].id, made[1].id] and page["has_more"]
    rest = client.get("/v1/batches", params={"limit": 2, "after": page["last_id"]}).json()
    assert [b["id"] for b in rest["data"]] == [made[0].id] and not rest["has_more"]
    cancelling = Batch.model_validate(client.post(f"/v1/batches/{made[0].id}/cancel").json())
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    again = client.post(f"/v1/batches/{made[0].id}/cancel").json()
    assert again["status"] == "cancelling"
    assert Batch.model_validate(client.get(f"/v1/batches/{made[0].id}").json()) == cancelling


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"input_file_id": "file-none", "endpoint": "/v1/embeddings"}, 404),
        ({"endpoint": "/v1/images/generations"}, 400),
        ({"completion_window": "1h"}, 400),
        ({"output_expires_after": {"anchor": "created_at", "seconds": 3600}}, 400),
    ],
)
def test_a_batch_that_cannot_be_made(
    client: TestClient, body: dict[str, object], status: int
) -> None:
    file_id = _upload(client, LINE.encode())["id"]
    request = {
        "input_file_id": file_id,
        "endpoint": "/v1/embeddings",
        "completion_window": "24h",
        **body,
    }
    answer = client.post("/v1/batches", json=request)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["message"]
