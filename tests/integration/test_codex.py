"""The real Codex CLI (npm @openai/codex, pinned, installed by harness/npm.py)
runs one `codex exec` turn against the embedded default through the
Responses API, as a new user would set it up: a custom provider with
`wire_api = "responses"`, no authentication.

Codex sends what agents send: namespace tools, a hosted web_search tool,
client_metadata, prompt_cache_key, reasoning settings, `store: false`. The
small model may answer oddly; what is tested is that every request Codex
makes is accepted and that the turn ends. Its requests go through a
recording proxy (harness/recorder.py): a refused one is shown whole in the
failure message.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from harness.npm import npm_bin
from harness.recorder import recording_proxy
from harness.stacks import MODEL, Stack

CODEX = ("@openai/codex", "0.169.0")
PROMPT = "What is the capital of France? Answer in one word, without running any command."
TURN_TIMEOUT_S = 600


def _greedy(body: bytes) -> bytes:
    """Codex sends no temperature, so the server samples at 1.0; with Codex's
    ~4,600-token prompt the 135M model then sometimes writes until the context
    is full (an incomplete response, which Codex reports as an error). The
    proxy adds `temperature: 0` where none is given, so the turn is the same
    every run; every field Codex sends still reaches cortex unchanged."""
    request = json.loads(body)
    if isinstance(request, dict) and "input" in request and "temperature" not in request:
        request["temperature"] = 0
        return json.dumps(request).encode()
    return body


def _config(base_url: str) -> str:
    return f"""
model = "{MODEL}"
model_provider = "neuraxis"
approval_policy = "never"

[model_providers.neuraxis]
name = "neuraxis"
base_url = "{base_url}/v1"
wire_api = "responses"
"""


def test_codex_exec_completes_a_turn(stack: Stack, tmp_path: Path) -> None:
    codex = npm_bin(*CODEX, "codex")
    home = tmp_path / "codex-home"
    work = tmp_path / "work"  # the only directory Codex sees; read-only to it
    home.mkdir()
    work.mkdir()
    last = tmp_path / "last-message.txt"
    # Nothing of the developer's own OpenAI or Codex setup may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env |= {"CODEX_HOME": str(home), "NO_COLOR": "1"}
    with recording_proxy(stack.base_url, _greedy) as (url, recording):
        (home / "config.toml").write_text(_config(url))
        run = subprocess.run(
            [
                str(codex),
                "exec",
                "--skip-git-repo-check",
                "--ephemeral",
                "--sandbox",
                "read-only",
                "--cd",
                str(work),
                "--output-last-message",
                str(last),
                PROMPT,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TURN_TIMEOUT_S,
        )
    report = f"codex stderr:\n{run.stderr[-6000:]}\nrequests:\n{recording.report()}"
    assert recording.exchanges, report
    assert not recording.rejected(), report
    assert run.returncode == 0, report
    assert last.read_text().strip(), report
