"""cortex/admin.py and its settings: requests go to the admin app or the API
app by the port they came in on, the admin app serves only /metrics and
/sd/neurons (404 in the envelope for the rest), and the sockets bind as
asked. The processes themselves: tests/integration/test_admin_listener.py."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from axon.settings import load_settings
from axon.v1 import neuron_pb2 as pb
from cortex.admin import create_admin_app
from cortex.app import create_app
from cortex.config import AdminSettings, CortexSettings, StoreSettings
from cortex.http.listeners import Listeners, bind, bound_port
from neuraxis.cli import build_parser
from neuraxis.options import overrides
from tests.unit.cortex.api.fakes import ScriptedPool

ADMIN_PORT = 9180


class OneNeuron(ScriptedPool):
    """Stands in for NeuronPool, with neurons for the admin app to list."""

    def neurons(self) -> list[tuple[str, pb.InfoResponse | None]]:
        info = pb.InfoResponse(
            metrics_port=9400,
            models=[pb.ModelInfo(id="m")],
            generation=pb.GPU_GENERATION_ADA,
            ready=True,
        )
        return [("10.0.0.1:50051", info), ("10.0.0.2:50051", None)]


def _admin() -> FastAPI:
    return create_admin_app(OneNeuron([]))


def _client(app: Listeners | FastAPI, port: int) -> httpx.AsyncClient:
    # httpx's ASGI transport puts the URL's host and port in the scope's `server`.
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=f"http://127.0.0.1:{port}"
    )


async def test_requests_go_to_the_app_of_the_port_they_came_in_on(tmp_path: Path) -> None:
    api = create_app(CortexSettings(store=StoreSettings(state_dir=tmp_path)), pool=OneNeuron([]))
    listeners = Listeners(api, _admin(), ADMIN_PORT)
    async with _client(listeners, 8080) as on_api, _client(listeners, ADMIN_PORT) as on_admin:
        assert (await on_api.get("/healthz")).json() == {"status": "ok"}
        for path in ("/metrics", "/sd/neurons", "/v1/adapters"):
            response = await on_api.get(path)
            assert response.status_code == 404
            assert response.json()["error"]["message"] == f"Unknown path {path}"
        assert (await on_admin.get("/metrics")).status_code == 200
        assert (await on_admin.get("/healthz")).status_code == 404
    assert listeners.app is api  # where cortex.main finds the readiness


async def test_the_admin_app_lists_the_neurons_that_answered() -> None:
    async with _client(_admin(), ADMIN_PORT) as client:
        groups = (await client.get("/sd/neurons")).json()
        assert groups == [
            {
                "targets": ["10.0.0.1:9400"],
                "labels": {"replica": "10.0.0.1:50051", "model": "m", "generation": "ada"},
            }
        ]
        metrics = await client.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        unknown = await client.get("/openapi.json")
        assert unknown.status_code == 404
        assert set(unknown.json()["error"]) == {"message", "type", "param", "code"}


def test_the_api_schema_leaves_the_admin_routes_out(tmp_path: Path) -> None:
    api = create_app(CortexSettings(store=StoreSettings(state_dir=tmp_path)), pool=OneNeuron([]))
    paths = set(api.openapi()["paths"])
    assert "/healthz" in paths and "/v1/chat/completions" in paths
    assert not paths & {"/metrics", "/sd/neurons", "/v1/adapters"}


def test_the_admin_listener_is_loopback_on_9180_by_default() -> None:
    settings = CortexSettings()
    assert (settings.admin.host, settings.admin.port) == ("127.0.0.1", 9180)


def test_the_admin_settings_come_from_flags_the_environment_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = build_parser().parse_args(["cortex", "--admin-port", "0", "--admin-host", "::1"])
    from_flags = load_settings(CortexSettings, None, overrides(args, CortexSettings))
    assert (from_flags.admin.host, from_flags.admin.port) == ("::1", 0)
    config = tmp_path / "cortex.toml"
    config.write_text('[admin]\nhost = "10.0.0.5"\nport = 9999\n')
    from_file = load_settings(CortexSettings, config, {})
    assert (from_file.admin.host, from_file.admin.port) == ("10.0.0.5", 9999)
    monkeypatch.setenv("NEURAXIS_CORTEX_ADMIN__PORT", "9998")
    assert load_settings(CortexSettings, config, {}).admin.port == 9998


def test_the_admin_port_may_not_be_the_api_port() -> None:
    with pytest.raises(ValidationError, match="admin port and port are both 8080"):
        CortexSettings(admin=AdminSettings(port=8080))
    assert CortexSettings(port=0, admin=AdminSettings(port=0)).admin.port == 0


def test_bind_takes_a_free_port_for_0_and_refuses_a_taken_one() -> None:
    with bind("127.0.0.1", 0) as sock:
        port = bound_port(sock)
        assert port > 0 and sock.get_inheritable()
        sock.listen()
        with pytest.raises(OSError):
            bind("127.0.0.1", port)
    with bind("::1", 0) as six:
        assert six.family == socket.AF_INET6
