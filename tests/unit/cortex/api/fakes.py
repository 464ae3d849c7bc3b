"""Honest stand-ins for cortex's API tests: a pool that answers every
request with a fixed script, and an app built on it."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi.testclient import TestClient

from cortex.app import create_app
from cortex.config import CortexSettings
from neuraxis.core.errors import NeuraxisError
from neuraxis.core.v1 import neuron_pb2 as pb

Script = list[pb.GenerateResponse | NeuraxisError]


class ScriptedPool:
    """Stands in for NeuronPool: answers every request with a fixed script;
    embeddings wait until `release` is set."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[pb.GenerateRequest] = []
        self.release = asyncio.Event()

    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    def served_models(self) -> dict[str, pb.ModelInfo]:
        return {
            "m": pb.ModelInfo(
                id="m", max_context_length=100, created=1, task=pb.MODEL_TASK_GENERATE
            ),
            "e": pb.ModelInfo(id="e", max_context_length=100, created=1, task=pb.MODEL_TASK_EMBED),
        }

    def missing_models(self) -> list[str]:
        return []

    def check_task(self, model: str, task: int, endpoint: str) -> None:
        pass

    def model_label(self, model: str) -> str:
        return model

    async def generate(self, request: pb.GenerateRequest) -> AsyncIterator[pb.GenerateResponse]:
        self.requests.append(request)
        for item in self.script:
            if isinstance(item, NeuraxisError):
                raise item
            yield item

    async def embed(self, request: pb.EmbedRequest) -> pb.EmbedResponse:
        await self.release.wait()
        return pb.EmbedResponse(prompt_tokens=1)


def client(script: Script) -> tuple[TestClient, ScriptedPool]:
    pool = ScriptedPool(script)
    settings = CortexSettings(state_dir=Path(tempfile.mkdtemp(prefix="neuraxis-test-")))
    app = create_app(settings, pool=pool)  # type: ignore[arg-type]
    return TestClient(app), pool
