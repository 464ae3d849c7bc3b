"""Honest stand-ins for cortex's API tests: a pool that answers every
request with a fixed script, and an app built on it."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.requests import Request
from starlette.types import Receive, Scope

from axon.errors import ModelNotFoundError, NeuraxisError
from axon.v1 import neuron_pb2 as pb
from cortex.api.caps import RequestCaps
from cortex.api.gateway import Gateway, Neurons, Runs
from cortex.app import create_app
from cortex.auth.keys import KeyRequest, make_key
from cortex.auth.settings import AuthSettings
from cortex.config import CortexSettings, StoreSettings
from cortex.recording import PrometheusRecorder
from cortex.routing.policy import RouteHints
from cortex.store.base import ResponseStore
from cortex.store.keys import SQLITE_FILE
from cortex.store.sqlite import SqliteResponseStore
from cortex.store.sqlite_keys import SqliteKeyStore

Script = list[pb.GenerateResponse | NeuraxisError]


class ScriptedPool:
    """Stands in for NeuronPool (any `cortex.app.Pool`): answers every
    request with a fixed script; embeddings wait until `release` is set."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[pb.GenerateRequest] = []
        self.hints: list[RouteHints | None] = []  # each request's, in order
        self.release = asyncio.Event()
        self.tokenized: list[pb.TokenizeRequest] = []
        self.detokenized: list[pb.DetokenizeRequest] = []

    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    def served_models(self) -> dict[str, pb.ModelInfo]:
        return {
            "m": pb.ModelInfo(
                id="m", max_context_length=100, created=1, task=pb.MODEL_TASK_GENERATE
            ),
            "e": pb.ModelInfo(id="e", max_context_length=100, created=1, task=pb.MODEL_TASK_EMBED),
        }

    def sleeping_models(self) -> dict[str, bool]:
        return {}

    def missing_models(self) -> list[str]:
        return []

    def check_task(self, model: str, task: int, endpoint: str) -> None:
        pass

    def model_label(self, model: str) -> str:
        return model

    def neurons(self) -> list[tuple[str, pb.InfoResponse | None]]:
        return []

    async def add_adapter(self, model: str, adapter_id: str, source: str) -> list[str]:
        raise ModelNotFoundError(f"No ready replica serves the model '{model}'.")

    async def remove_adapter(self, adapter_id: str) -> list[str]:
        raise ModelNotFoundError(f"The model '{adapter_id}' does not exist.")

    async def generate(
        self, request: pb.GenerateRequest, hints: RouteHints | None = None
    ) -> AsyncIterator[pb.GenerateResponse]:
        self.requests.append(request)
        self.hints.append(hints)
        for item in self.script:
            if isinstance(item, NeuraxisError):
                raise item
            yield item

    async def embed(
        self, request: pb.EmbedRequest, hints: RouteHints | None = None
    ) -> pb.EmbedResponse:
        await self.release.wait()
        return pb.EmbedResponse(prompt_tokens=1)

    async def tokenize(
        self, request: pb.TokenizeRequest, hints: RouteHints | None = None
    ) -> pb.TokenizeResponse:
        """A token per character of the prompt, or per message."""
        self.tokenized.append(request)
        self.hints.append(hints)
        count = len(request.prompt) if request.HasField("prompt") else len(request.messages)
        return pb.TokenizeResponse(tokens=range(count), max_model_len=100)

    async def detokenize(
        self, request: pb.DetokenizeRequest, hints: RouteHints | None = None
    ) -> pb.DetokenizeResponse:
        self.detokenized.append(request)
        self.hints.append(hints)
        return pb.DetokenizeResponse(prompt="".join(chr(97 + t % 26) for t in request.tokens))


def gateway(neurons: Neurons, store: ResponseStore | None = None) -> Gateway:
    """The API's gateway over `neurons` with the default caps, no auth and
    a store in memory (or `store`)."""
    return Gateway(
        neurons=neurons,
        caps=RequestCaps(),
        store=store or SqliteResponseStore(Path(":memory:")),
        runs=Runs("test:1/1", lease_s=60),
        recorder=PrometheusRecorder(),
    )


def api_request(gateway: Gateway, receive: Receive | None = None) -> Request:
    """A request to an app that holds only `gateway`, for calling handlers'
    helpers and dispatch without a server."""
    app = FastAPI()
    app.state.gateway = gateway
    scope: Scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "app": app}
    return Request(scope, receive) if receive is not None else Request(scope)


def client(script: Script) -> tuple[TestClient, ScriptedPool]:
    pool = ScriptedPool(script)
    settings = CortexSettings(
        store=StoreSettings(state_dir=Path(tempfile.mkdtemp(prefix="neuraxis-test-")))
    )
    app = create_app(settings, pool=pool)
    return TestClient(app), pool


def auth_client(script: Script, *keys: KeyRequest) -> tuple[TestClient, ScriptedPool, list[str]]:
    """An app with `auth = required` on a real SQLite key store holding
    `keys`; returns their secrets in the same order."""
    state_dir = Path(tempfile.mkdtemp(prefix="neuraxis-test-"))
    secrets: list[str] = []

    async def add() -> None:
        store = SqliteKeyStore(state_dir / SQLITE_FILE)
        try:
            for request in keys:
                secret, record = make_key(request, int(time.time()))
                await store.add(record)
                secrets.append(secret)
        finally:
            await store.close()

    asyncio.run(add())
    pool = ScriptedPool(script)
    settings = CortexSettings(
        store=StoreSettings(state_dir=state_dir), auth=AuthSettings(mode="required")
    )
    app = create_app(settings, pool=pool)
    return TestClient(app), pool, secrets
