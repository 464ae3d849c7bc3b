"""A model repo served on 127.0.0.1 through the Hugging Face hub's own
endpoints, so that huggingface_hub (pointed at it with HF_ENDPOINT) fetches
it as it fetches from the hub: the revision's commit, the file tree, then
each file's metadata (HEAD) and bytes (GET) under /resolve/.

Only what a snapshot download of a small public repo asks for: no LFS, no
Xet, no pagination, no authentication."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import unquote, urlsplit

from tests.unit.neuron.hub_env import COMMIT


def git_blob_id(data: bytes) -> str:
    """The id git (and the hub, as a small file's ETag) gives these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class LocalHub:
    """`repo_id`'s `files` at one commit, which each of `revisions` names.
    A context manager: the server runs on a thread in between; `requests`
    lists what was asked ("GET /api/..."), `endpoint` is the HF_ENDPOINT."""

    def __init__(
        self, repo_id: str, files: dict[str, bytes], revisions: tuple[str, ...] = ("main",)
    ) -> None:
        self.repo_id, self.files, self.revisions = repo_id, files, revisions
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def commit_of(self, revision: str) -> str | None:
        return COMMIT if revision in (*self.revisions, COMMIT) else None

    def answer(self, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for a request to `path`."""
        repo = re.escape(self.repo_id)
        info = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
        if info and info[1] != self.repo_id:
            return _error(404, "RepoNotFound")  # the hub's answer to an unknown repo
        if info and not self.commit_of(info[2]):
            return _error(404, "RevisionNotFound")
        if info:
            siblings = [{"rfilename": name} for name in self.files]
            return _json({"id": self.repo_id, "sha": COMMIT, "siblings": siblings})
        if re.fullmatch(rf"/api/models/{repo}/tree/{COMMIT}", path):
            return _json(
                [
                    {"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
                    for name, data in self.files.items()
                ]
            )
        resolve = re.fullmatch(rf"/{repo}/resolve/([^/]+)/(.+)", path)
        if resolve and self.commit_of(resolve[1]) and resolve[2] in self.files:
            data = self.files[resolve[2]]
            headers = {
                "X-Repo-Commit": COMMIT,
                "ETag": f'"{git_blob_id(data)}"',
                "Content-Length": str(len(data)),
            }
            return 200, headers, b"" if method == "HEAD" else data
        return _error(404, "EntryNotFound")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._reply("GET")

            def do_HEAD(self) -> None:
                self._reply("HEAD")

            def _reply(self, method: str) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requests.append(f"{method} {path}")
                status, headers, body = hub.answer(method, path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # the requests are kept in hub.requests

        return Handler


def _json(value: object) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps(value).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    return 200, headers, body


def _error(status: int, code: str) -> tuple[int, dict[str, str], bytes]:
    """An error as the hub sends it: huggingface_hub reads its kind from the
    X-Error-Code header."""
    return status, {"X-Error-Code": code, "Content-Length": "0"}, b""
