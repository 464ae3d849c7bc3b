"""py-spy's samples sorted into stages: the innermost frame that names a
stage decides; the raw format's counts add up per stage."""

from __future__ import annotations

from pathlib import Path

from harness.chat_stream import role
from harness.py_spy import read_raw, stage_of


def test_the_innermost_matching_frame_decides() -> None:
    frames = [
        "_run (asyncio/events.py:80)",
        "Generate (neuron/server.py:130)",
        "generate_response (neuron/convert.py:120)",
    ]
    assert stage_of(frames) == "protobuf"
    assert stage_of(frames[:2]) == "neuron servicer"
    assert stage_of(["main (somewhere.py:1)"]) == "other"


def test_raw_samples_add_up_by_stage(tmp_path: Path) -> None:
    raw = tmp_path / "neuron.txt"
    raw.write_text(
        "run (asyncio/base_events.py:1);Generate (neuron/server.py:2) 7\n"
        "run (asyncio/base_events.py:1);_send (grpc/aio/_server.py:3) 5\n"
        "run (asyncio/base_events.py:1);Generate (neuron/server.py:2) 3\n"
    )
    assert read_raw(raw) == {"neuron servicer": 10, "gRPC": 5}


def test_roles_from_command_line_or_kernel_name() -> None:
    assert role("python -m neuraxis.cli neuron serve --port 1", "python") == "neuron"
    assert role("", "VLLM::EngineCor") == "engine core"
    assert role("python -m vllm.entrypoints.openai.api_server", "python") == "vLLM API server"
    assert role("/usr/bin/sleep 1", "sleep") == "other (sleep)"
