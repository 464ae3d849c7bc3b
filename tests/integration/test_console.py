"""What a person sees: `neuraxis up` on a terminal (a pseudo-terminal here)
prints its progress from start to ready and nothing else (no JSON, no
third-party noise), stays quiet while it serves, and on Ctrl-C during a
streamed request ends the stream with its terminal events and stops without
a traceback. It runs with `--auth required`, as an operator trying keys
would: a key made with `neuraxis keys create` on the same state directory
after `up` started works at once, and a request without one is a 401.

One real `up` (Ray, the controller, vLLM CPU replicas, cortex) for the
module; cortex's graceful shutdown is made short (2 s) so that the stream,
which would run on for minutes, is still open when it runs out.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from axon.process import stop_process_group
from harness.ports import free_port
from harness.procs import REPO, child_env, new_key
from harness.stacks import ENGINE_START_TIMEOUT_S, MODEL
from harness.streamed_chat import greedy_chat

GRACE_S = 2


@dataclass
class Console:
    """`neuraxis up` with a pseudo-terminal for its stdout and stderr."""

    popen: subprocess.Popen[bytes]
    base_url: str
    state_dir: Path
    _master: int
    _chunks: list[bytes] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def read_forever(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:  # EIO: every writer has gone
                return
            if not data:
                return
            with self._lock:
                self._chunks.append(data)

    def text(self) -> str:
        with self._lock:
            return b"".join(self._chunks).decode(errors="replace").replace("\r\n", "\n")

    def wait_for(self, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if re.search(pattern, text, re.MULTILINE):
                return text
            if self.popen.poll() is not None:
                # Gone: what it wrote last is read within moments.
                deadline = min(deadline, time.monotonic() + 2)
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} on the console:\n{self.text()[-4000:]}")


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    state = tmp_path_factory.mktemp("console") / "neuraxis"
    port = free_port()
    master, slave = pty.openpty()
    env = child_env()
    env["NEURAXIS_CORTEX_SHUTDOWN_GRACE_S"] = str(GRACE_S)
    for name in ("JOURNAL_STREAM", "INVOCATION_ID"):
        env.pop(name, None)
    args = ["up", "--port", str(port), "--ray-port", str(free_port()), "--state-dir", str(state)]
    args += ["--admin-port", str(free_port()), "--auth", "required"]
    popen = subprocess.Popen(
        [sys.executable, "-m", "neuraxis.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    os.close(slave)
    console = Console(popen, f"http://127.0.0.1:{port}", state, master)
    reader = threading.Thread(target=console.read_forever, daemon=True)
    reader.start()
    try:
        yield console
    finally:
        stop_process_group(popen, signal.SIGTERM, 90)
        reader.join(timeout=10)
        os.close(master)


def _start_to_ready(text: str) -> list[str]:
    lines = text.split("\n")
    end = next(i for i, line in enumerate(lines) if line.startswith("neuraxis: ready: "))
    return lines[: end + 1]


def test_the_console_from_start_to_ready_is_the_progress(console: Console) -> None:
    text = console.wait_for(r"^neuraxis: ready: http", ENGINE_START_TIMEOUT_S)
    lines = _start_to_ready(text)
    print("\n".join(lines))  # the closing note's copy (pytest -s)
    assert all(line.startswith("neuraxis: ") for line in lines), lines
    said = "\n".join(lines)
    assert re.search(r"^neuraxis: models prepared in [\d.]+ s", said, re.MULTILINE)
    assert re.search(r"^neuraxis: Ray started on 127\.0\.0\.1:\d+ in [\d.]+ s", said, re.M)
    for model in (MODEL, "all-minilm-l6-v2"):
        assert re.search(rf"^neuraxis: {model}: loading \(", said, re.MULTILINE), said
        assert re.search(rf"^neuraxis: {model}: ready in [\d.]+ s at 127\.0\.0\.1:", said, re.M)
    assert lines[-1] == f"neuraxis: ready: {console.base_url}"
    assert not [line for line in lines if "{" in line or "warning" in line.lower()]


def _new_key(console: Console) -> str:
    """A key made the way an operator makes one, on up's state directory."""
    return new_key("console", "--state-dir", str(console.state_dir))


def test_up_with_auth_required_takes_a_key_made_after_it_started(console: Console) -> None:
    console.wait_for(r"^neuraxis: ready: http", ENGINE_START_TIMEOUT_S)
    body = {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}
    url = f"{console.base_url}/v1/chat/completions"
    refused = httpx.post(url, json=body, timeout=60)
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == "invalid_api_key"
    key = _new_key(console)
    assert key.startswith("nx-")
    served = httpx.post(url, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert served.status_code == 200, served.text


def _stream_lines(base_url: str, key: str, started: threading.Event, lines: list[str]) -> None:
    body = greedy_chat(MODEL, "Count from 1 to 5000, separated by commas.", 4000)
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as r:
        for line in r.iter_lines():
            if line:
                lines.append(line)
                if '"content":"' in line and '"content":""' not in line:
                    started.set()


def test_ctrl_c_during_a_stream_ends_it_and_prints_no_traceback(console: Console) -> None:
    console.wait_for(r"^neuraxis: ready: http", ENGINE_START_TIMEOUT_S)
    key = _new_key(console)
    served = httpx.post(
        f"{console.base_url}/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert served.status_code == 200
    started, lines = threading.Event(), list[str]()
    client = threading.Thread(target=_stream_lines, args=(console.base_url, key, started, lines))
    client.start()
    assert started.wait(timeout=60), lines
    os.killpg(console.popen.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    client.join(timeout=GRACE_S + 60)
    assert not client.is_alive()
    assert console.popen.wait(timeout=120) == 0
    text = console.wait_for(r"^neuraxis: stopped$", 10)

    # The stream ended with its terminal events: the error chunk, then [DONE].
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: ")).get("error")
    assert error is not None, f"the stream ended before the cutoff: {lines[-3:]}"
    assert error["code"] == "service_unavailable"
    # Served quietly, stopped without a traceback or a JSON line.
    after = text[text.index("Press Ctrl-C to stop.") :]
    print(after)
    assert "Traceback" not in after and "Exception in ASGI" not in after
    assert not [line for line in after.split("\n") if line.lstrip().startswith("{")]
    assert "neuraxis.cortex.requests" not in text
    assert after.index("neuraxis: stopped") > after.index("neuraxis: stopping")
