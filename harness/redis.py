"""A throwaway Redis server for the tests (the Ray head's GCS storage with
fault tolerance on): Debian's redis-server (installed when missing), on a
free port of 127.0.0.1, its data in a temporary directory, stopped at the
end. Persistence is off: Redis itself outlives every head restart a test
makes, which is all the head needs of it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from axon.process import stop_process_group
from harness.ports import free_port
from harness.services import redis_server_binary


def _answers(port: int) -> bool:
    """True once the server replies +PONG to PING (RESP, no client library)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis_server(timeout_s: float = 30.0) -> Iterator[str]:
    """Yields the server's address, "redis://127.0.0.1:PORT"."""
    binary = redis_server_binary()
    data = Path(tempfile.mkdtemp(prefix="neuraxis-redis-"))
    port = free_port()
    args = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(data),
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
    ]
    with open(data / "redis.log", "wb") as log:
        server = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not _answers(port):
            if server.poll() is not None or time.monotonic() > deadline:
                text = (data / "redis.log").read_text(errors="replace")
                raise RuntimeError(f"redis-server did not start:\n{text[-2000:]}")
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}"
    finally:
        stop_process_group(server, timeout_s=10)
        shutil.rmtree(data, ignore_errors=True)
