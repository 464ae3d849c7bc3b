"""doctor's network checks: a port free, taken by another process (found
with its pid and advice), an address not on this host; whose process holds
a port; cortex answering."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from neuraxis.doctor.finding import Status
from neuraxis.doctor.host import Host
from neuraxis.doctor.network import Port, _port, check, holder_of, is_ours


@pytest.fixture
def taken() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_taken_port_is_found_with_its_holder_and_advice(taken: int) -> None:
    finding = _port(Port("cortex.toml port", "127.0.0.1", taken))
    assert finding.status is Status.FAIL
    assert finding.found.startswith(
        f"127.0.0.1:{taken} (cortex.toml port): taken by pid {os.getpid()}"
    )
    assert finding.advice == "stop that process, or set port to a free port"
    assert holder_of(taken) is not None


def test_a_free_port_and_an_address_elsewhere() -> None:
    port = free_port()
    assert _port(Port("cortex.toml admin_port", "127.0.0.1", port)).status is Status.OK
    elsewhere = _port(Port("cortex.toml port", "192.0.2.1", port))  # TEST-NET-1
    assert elsewhere.status is Status.FAIL
    assert "is not an address of this host" in elsewhere.found


def test_our_own_services_are_told_apart() -> None:
    assert is_ours("/opt/neuraxis/cortex/bin/python3.11 /opt/neuraxis/cortex/bin/neuraxis cortex")
    assert is_ours("/usr/bin/python3 -m neuraxis.cli up")
    assert is_ours(
        "/opt/neuraxis/cortex/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server"
        " --gcs_server_port=6379"
    )
    assert not is_ours("/usr/sbin/nginx -g daemon off;")
    assert is_ours("/usr/bin/python3 -u -m cortex.main --config cortex.toml")
    assert is_ours("/usr/bin/python3 -W ignore -X dev /opt/neuraxis/cortex/bin/neuraxis up")
    assert is_ours("ray::ReplicaActor.serve")
    assert not is_ours("python -m pytest tests/unit/neuraxis/test_doctor_network.py")
    # An argument naming a neuraxis folder or module is not the program: the
    # test run over tests/unit/neuraxis holds the taken port above.
    assert not is_ours("python -m pytest -q tests/unit/neuraxis")
    assert not is_ours("/usr/bin/less /opt/neuraxis/cortex/bin/neuraxis neuraxis.cli")
    assert not is_ours('python -c "import sys;exec(eval(sys.stdin.readline()))"')
    assert not is_ours("")


def test_cortex_answering_from_this_host(tmp_path: Path) -> None:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (tmp_path / "neuron.toml").write_text('generation = "cpu"\n')
        url = f"http://127.0.0.1:{server.server_address[1]}"
        found = {f.check: f for f in check(Host(config_dir=tmp_path, cortex_url=url))}
        assert found["cortex"].status is Status.OK
        dead = f"http://127.0.0.1:{free_port()}"
        found = {f.check: f for f in check(Host(config_dir=tmp_path, cortex_url=dead))}
        assert found["cortex"].status is Status.FAIL
    finally:
        server.shutdown()
        server.server_close()
