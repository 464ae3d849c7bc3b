"""The Files and Batch APIs through real processes: one cortex (auth
required, two tenants' keys) in front of sim neurons (a chat model, a slow
one and an embedding model), driven by the strict openai SDK: a batch end to
end for chat and embeddings, bad lines in the error file, a cancel
mid-batch, another tenant's 404s, and a cortex SIGKILLed mid-batch and
started again on the same store (every custom_id exactly once).

The issue's 1,000 lines per batch: NEURAXIS_TEST_BATCH_LINES=1000 (50 in
the suite).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import NotFoundError, OpenAI

from harness.gateway import Sim, cortex, sim_gateway
from harness.keys import new_key
from harness.polling import wait_until

CHAT, SLOW, EMBED = "sim-chat", "sim-slow", "sim-embed"
LINES = int(os.environ.get("NEURAXIS_TEST_BATCH_LINES", "50"))
# The batch runner's lease and polling, short so that a killed cortex's
# batch is taken up again within seconds.
RUNNER = ["--batches-lease-s", "3", "--batches-poll-s", "0.2"]
# The batch of the SIGKILL test: at 0.3 s a line, 8 at a time, a few
# seconds of work, a sixth of it done before the kill.
KILLED_LINES = 60


@dataclass
class BatchStack:
    base_url: str
    admin_url: str
    state_dir: Path
    neurons: list[str]
    logs: Path
    key_a: str
    key_b: str

    def client(self, key: str | None = None, base_url: str | None = None) -> OpenAI:
        return OpenAI(
            base_url=f"{base_url or self.base_url}/v1",
            api_key=key or self.key_a,
            max_retries=0,
            _strict_response_validation=True,
        )


@pytest.fixture(scope="module")
def batch_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BatchStack]:
    logs = tmp_path_factory.mktemp("batch-logs")
    state_dir = tmp_path_factory.mktemp("batch-state")
    sims = [
        Sim(CHAT),
        Sim(SLOW, ["--sim-ttft-s", "0.3"]),
        Sim(EMBED, ["--task", "embed"]),
    ]
    args = ["--auth", "required", "--state-dir", str(state_dir), *RUNNER]
    with sim_gateway(logs, "batch", *args, sims=sims) as running:
        yield BatchStack(
            running.base_url,
            running.admin_url,
            state_dir,
            [n.address for n in running.neurons],
            logs,
            new_key(state_dir, "tenant-a"),
            new_key(state_dir, "tenant-b"),
        )


def _chat_line(custom_id: str, model: str = CHAT) -> dict[str, Any]:
    body = {"model": model, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def _upload(client: OpenAI, lines: list[str]) -> str:
    content = ("\n".join(lines) + "\n").encode()
    return client.files.create(file=("in.jsonl", content), purpose="batch").id


def _wait(client: OpenAI, batch_id: str, statuses: set[str], timeout_s: float = 120) -> Any:
    assert wait_until(
        lambda: client.batches.retrieve(batch_id).status in statuses, timeout_s, 0.2
    ), client.batches.retrieve(batch_id)
    return client.batches.retrieve(batch_id)


def _lines_of(client: OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


@pytest.mark.parametrize(
    ("endpoint", "model"), [("/v1/chat/completions", CHAT), ("/v1/embeddings", EMBED)]
)
def test_a_batch_runs_end_to_end(batch_stack: BatchStack, endpoint: str, model: str) -> None:
    client = batch_stack.client()
    lines = []
    for i in range(LINES):
        if endpoint == "/v1/embeddings":
            body: dict[str, Any] = {"model": model, "input": f"text number {i}"}
        else:
            body = _chat_line(str(i))["body"]
        lines.append(
            json.dumps({"custom_id": f"r{i}", "method": "POST", "url": endpoint, "body": body})
        )
    file_id = _upload(client, lines)
    file = client.files.retrieve(file_id)
    assert (file.purpose, file.status) == ("batch", "processed")
    assert file_id in [f.id for f in client.files.list(purpose="batch").data]
    created = client.batches.create(
        input_file_id=file_id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
        metadata={"suite": "batches"},
    )
    assert created.status == "validating" and created.metadata == {"suite": "batches"}
    done = _wait(client, created.id, {"completed", "failed"})
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (LINES, LINES)
    assert done.request_counts.failed == 0 and done.error_file_id is None
    assert done.usage is not None and done.usage.input_tokens > 0
    output = _lines_of(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in output) == sorted(f"r{i}" for i in range(LINES))
    for line in output:
        assert line["error"] is None and line["response"]["status_code"] == 200
        expected = "list" if endpoint == "/v1/embeddings" else "chat.completion"
        assert line["response"]["body"]["object"] == expected
        assert line["id"].startswith("batch_req_") and line["response"]["request_id"]
    assert created.id in [b.id for b in client.batches.list(limit=100).data]


def test_bad_lines_go_to_the_error_file_with_their_ids(batch_stack: BatchStack) -> None:
    client = batch_stack.client()
    good = [json.dumps(_chat_line(f"ok{i}")) for i in range(3)]
    wrong_url = {**_chat_line("bad-url"), "url": "/v1/completions"}
    unknown_model = _chat_line("bad-model", model="no-such-model")
    lines = [
        good[0],
        "{not json",
        json.dumps(wrong_url),
        good[1],
        json.dumps(unknown_model),
        json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}}),
        good[2],
    ]
    batch = client.batches.create(
        input_file_id=_upload(client, lines),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    done = _wait(client, batch.id, {"completed", "failed"})
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 4)
    assert sorted(o["custom_id"] for o in _lines_of(client, done.output_file_id)) == [
        "ok0",
        "ok1",
        "ok2",
    ]
    errors = {(e["custom_id"], json.dumps(e)) for e in _lines_of(client, done.error_file_id)}
    by_id = dict(errors)
    assert set(by_id) == {None, "bad-url", "bad-model"}
    assert "Line 2" in next(m for c, m in errors if c is None and "invalid_json_line" in m)
    assert "Line 6" in next(m for c, m in errors if c is None and "missing_required_parameter" in m)
    assert '"code": "invalid_url"' in by_id["bad-url"] and "Line 3" in by_id["bad-url"]
    # A request the model refused: its answer, as a client would have had it.
    refused = json.loads(by_id["bad-model"])
    assert refused["response"]["status_code"] == 404
    assert refused["response"]["body"]["error"]["code"] == "model_not_found"


def test_cancel_mid_batch(batch_stack: BatchStack) -> None:
    client = batch_stack.client()
    lines = [json.dumps(_chat_line(f"c{i}", SLOW)) for i in range(200)]
    batch = client.batches.create(
        input_file_id=_upload(client, lines),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    assert wait_until(
        lambda: (client.batches.retrieve(batch.id).request_counts or _none()).completed >= 8, 60
    )
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = _wait(client, batch.id, {"cancelled"})
    assert done.cancelled_at is not None and done.request_counts is not None
    assert 8 <= done.request_counts.completed < 200
    output = _lines_of(client, done.output_file_id)
    assert len(output) == done.request_counts.completed
    assert len({o["custom_id"] for o in output}) == len(output)


class _none:  # noqa: N801 (a stand-in for request_counts before they exist)
    completed = 0


def test_another_tenant_gets_404(batch_stack: BatchStack) -> None:
    owner, other = batch_stack.client(), batch_stack.client(batch_stack.key_b)
    file_id = _upload(owner, [json.dumps(_chat_line("t0"))])
    batch = owner.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    for call in (
        lambda: other.files.retrieve(file_id),
        lambda: other.files.content(file_id),
        lambda: other.files.delete(file_id),
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
        lambda: other.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(NotFoundError):
            call()
    assert file_id not in [f.id for f in other.files.list().data]
    assert batch.id not in [b.id for b in other.batches.list().data]
    assert owner.files.retrieve(file_id).id == file_id  # still there for its owner
    assert owner.files.delete(file_id).deleted
    with pytest.raises(NotFoundError):
        owner.files.retrieve(file_id)


def test_cortex_killed_mid_batch_resumes_every_line_once(
    batch_stack: BatchStack, tmp_path: Path
) -> None:
    # A cortex on a store of its own, killed while the batch runs, then
    # another started on that store: the batch's lease lapses and it is
    # taken up where it was.
    key = new_key(tmp_path, "tenant-k")
    args = ["--auth", "required", "--state-dir", str(tmp_path), *RUNNER]
    first = cortex(batch_stack.logs / "killed-1.log", batch_stack.neurons, *args)
    lines = [json.dumps(_chat_line(f"k{i}", SLOW)) for i in range(KILLED_LINES)]
    try:
        first.wait_ready()
        client = batch_stack.client(key, base_url=first.base_url)
        batch = client.batches.create(
            input_file_id=_upload(client, lines),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        assert wait_until(
            lambda: (client.batches.retrieve(batch.id).request_counts or _none()).completed >= 10,
            60,
        )
    finally:
        first.proc.stop(signal.SIGKILL)
    # On the same port: its batch is let go at once (the killed pid is gone).
    second = cortex(batch_stack.logs / "killed-2.log", batch_stack.neurons, *args, port=first.port)
    try:
        second.wait_ready()
        client = batch_stack.client(key, base_url=second.base_url)
        done = _wait(client, batch.id, {"completed", "failed"}, timeout_s=180)
        assert done.status == "completed", done
        assert done.request_counts is not None and done.request_counts.completed == KILLED_LINES
        ids = [o["custom_id"] for o in _lines_of(client, done.output_file_id)]
        assert sorted(ids) == sorted(f"k{i}" for i in range(KILLED_LINES))  # each exactly once
    finally:
        second.proc.stop()


def test_a_batchs_usage_lands_in_the_tenants_ledger(batch_stack: BatchStack) -> None:
    # A tenant of its own: the ledger's rows for it are this batch's alone.
    key = new_key(batch_stack.state_dir, "tenant-ledger")
    client = batch_stack.client(key)
    since = int(time.time()) - 60
    lines = [json.dumps(_chat_line(f"u{i}")) for i in range(5)]
    batch = client.batches.create(
        input_file_id=_upload(client, lines),
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    done = _wait(client, batch.id, {"completed", "failed"})
    assert done.usage is not None and done.request_counts is not None

    def ledger() -> dict[str, int]:
        query = {"start_time": str(since), "bucket_width": "1d", "group_by": "tenant"}
        page = httpx.get(f"{batch_stack.admin_url}/v1/usage", params=query, timeout=10).json()
        totals = {"requests": 0, "input": 0, "output": 0}
        for bucket in page["data"]:
            for result in bucket["results"]:
                if result["tenant"] == "tenant-ledger":
                    totals["requests"] += result["num_model_requests"]
                    totals["input"] += result["input_tokens"]
                    totals["output"] += result["output_tokens"]
        return totals

    expected = {"requests": 5, "input": done.usage.input_tokens, "output": done.usage.output_tokens}
    # The ledger flushes every [tenancy] ledger_flush_s (2 s).
    assert wait_until(lambda: ledger() == expected, 30, 0.5), (ledger(), expected)


def test_every_files_and_batches_route_needs_a_key(batch_stack: BatchStack) -> None:
    for method, path in [
        ("POST", "/v1/files"),
        ("GET", "/v1/files"),
        ("GET", "/v1/files/file-x"),
        ("GET", "/v1/files/file-x/content"),
        ("DELETE", "/v1/files/file-x"),
        ("POST", "/v1/batches"),
        ("GET", "/v1/batches"),
        ("GET", "/v1/batches/batch_x"),
        ("POST", "/v1/batches/batch_x/cancel"),
    ]:
        answer = httpx.request(method, batch_stack.base_url + path, timeout=30)
        assert answer.status_code == 401, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "invalid_api_key"
