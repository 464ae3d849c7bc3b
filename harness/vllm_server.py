"""vLLM's own OpenAI server (`python -m vllm.entrypoints.openai.api_server`),
started from the project's venv with the same engine settings as our neuron:
what a user would run instead of neuraxis.

`neuron_engine_args` asks the neuron what it starts its engine with
(`neuraxis neuron serve --print-engine-args`), `matched_settings` has vLLM
resolve them and the server flags that reproduce them (vllm_config.py), and
`running_vllm` starts the server and stops it (its whole process group: the
API process and its EngineCore) at the end. With `renderer=True` it starts
vLLM's engine-less server instead (`vllm launch render`: the same /tokenize
and /detokenize code over the model's tokenizer and chat template, with no
model weights loaded), which comes up in a fraction of the time.

What does not live here: the comparison (vs_vllm.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from axon.process import stop_process_group
from harness.bench_stack import CHAT_MODEL
from harness.ports import free_port
from harness.procs import REPO, child_env, wait_http_ok
from harness.vllm_config import matched_in_child

READY_TIMEOUT_S = 600.0
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
RENDERER_MODULE = "vllm.entrypoints.launchers.render.entry"


@dataclass(frozen=True)
class EngineArgs:
    """What the neuron passes to AsyncEngineArgs, and the environment it sets."""

    kwargs: dict[str, Any]
    env: dict[str, str]


def neuron_engine_args(model: str = CHAT_MODEL) -> EngineArgs:
    command = ["neuron", "serve", "--print-engine-args", "--model", model]
    done = subprocess.run(
        [sys.executable, "-m", "neuraxis.cli", *command],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    printed = json.loads(done.stdout)
    return EngineArgs(kwargs=printed["engine_args"], env=printed["env"])


@dataclass(frozen=True)
class VllmServer:
    popen: subprocess.Popen[bytes]
    base_url: str


@contextmanager
def running_vllm(
    args: list[str], env: dict[str, str], log_path: Path, renderer: bool = False
) -> Iterator[VllmServer]:
    """vLLM's server (or its engine-less renderer) on a free 127.0.0.1 port
    with `args` and `env` added to the environment, until the block ends."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", RENDERER_MODULE if renderer else SERVER_MODULE]
    command += [*args, "--host", "127.0.0.1", "--port", str(port)]
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**child_env(), **env},
            cwd=REPO,
            start_new_session=True,
        )
    server = VllmServer(popen, f"http://127.0.0.1:{port}")
    try:
        print(f"starting vLLM's server (log: {log_path}) ...", flush=True)
        _wait_ready(server, log_path)
        yield server
    finally:
        stop_process_group(popen, signal.SIGTERM, 60)


def _wait_ready(server: VllmServer, log_path: Path) -> None:
    wait_http_ok(server.popen, f"{server.base_url}/v1/models", READY_TIMEOUT_S, log_path)


def matched_settings() -> tuple[list[str], dict[str, str], dict[str, Any], dict[str, Any]]:
    """The neuron's engine settings, vLLM's server flags that reproduce them,
    and both sides' settings as vLLM resolves them (which must agree)."""
    engine = neuron_engine_args()
    flags, ours, theirs = matched_in_child(engine.kwargs, CHAT_MODEL, engine.env)
    return flags, engine.env, ours, theirs
