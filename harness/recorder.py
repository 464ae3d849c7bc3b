"""A recording HTTP proxy for tests of real clients (the Codex CLI): it
forwards every request to cortex unchanged, streams the answer back, and
keeps what went through, so that a failing test can show the exact body a
client sent and the error cortex gave it.

It answers in HTTP/1.0 with the connection closed after each response (no
Content-Length needed for a stream); the clients under test accept that.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Exchange:
    method: str
    path: str
    body: bytes
    status: int = 0
    answer: bytes = b""  # kept for error statuses only


@dataclass
class Recording:
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def rejected(self) -> list[Exchange]:
        with self.lock:
            return [e for e in self.exchanges if e.status >= 400]

    def report(self) -> str:
        """Every request, and the body and answer of each one refused."""
        lines: list[str] = []
        with self.lock:
            for e in self.exchanges:
                lines.append(f"{e.method} {e.path} -> {e.status} ({len(e.body)} bytes)")
                if e.status >= 400:
                    lines.append(f"  request: {_pretty(e.body)}")
                    lines.append(f"  answer: {e.answer.decode(errors='replace')}")
        return "\n".join(lines)


def _pretty(body: bytes) -> str:
    try:
        return json.dumps(json.loads(body), indent=1)[:20000]
    except ValueError:
        return body[:2000].decode(errors="replace")


Rewrite = Callable[[bytes], bytes]


def _handler(
    upstream: str, recording: Recording, client: httpx.Client, rewrite: Rewrite | None
) -> type:
    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if rewrite is not None and body:
                body = rewrite(body)
            exchange = Exchange(self.command, self.path, body)
            with recording.lock:
                recording.exchanges.append(exchange)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            request = client.build_request(
                self.command, upstream + self.path, headers=headers, content=body
            )
            answer = client.send(request, stream=True)
            try:
                exchange.status = answer.status_code
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in _HOP and key.lower() != "content-encoding":
                        self.send_header(key, value)
                self.end_headers()
                for chunk in answer.iter_bytes():
                    if answer.status_code >= 400:
                        exchange.answer += chunk
                    self.wfile.write(chunk)
                    self.wfile.flush()
            finally:
                answer.close()

        # http.server's method names, fixed by it.
        do_GET = _forward  # noqa: N815
        do_POST = _forward  # noqa: N815
        do_DELETE = _forward  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the recording is the log

    return Handler


@contextmanager
def recording_proxy(
    upstream: str, rewrite: Rewrite | None = None
) -> Iterator[tuple[str, Recording]]:
    """Yields the proxy's base URL and its recording; `rewrite` changes each
    request body on its way (to find out which field a server refuses)."""
    recording = Recording()
    with httpx.Client(timeout=httpx.Timeout(600.0)) as client:
        handler = _handler(upstream, recording, client, rewrite)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}", recording
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
