"""Where py-spy's samples fall: each sample's stage (logging, metrics,
protobuf, ...) from its frames, and a raw (collapsed) profile read into
counts per stage (bench/profile_stages.py takes the profiles)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

# (stage, file patterns): the first stage, innermost frame first, that matches.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("logging", ("logging/", "axon/logs.py")),
    ("metrics", ("prometheus_client", "cortex/metrics.py", "neuron/metrics.py")),
    ("protobuf", ("google/protobuf", "_pb2.py", "neuron/convert.py", "axon/protomaps")),
    ("detokenise", ("detokenizer", "tokenizers", "transformers/", "output_processor.py")),
    ("JSON / pydantic", ("pydantic", "json/", "orjson")),
    ("SSE framing", ("cortex/http/sse.py", "sse_starlette", "streaming.py")),
    ("choices / chunks", ("cortex/api/", "serving.py", "chat_completion/")),
    ("gRPC", ("grpc/", "grpc_health")),
    ("HTTP server", ("uvicorn", "h11", "httptools", "starlette", "fastapi", "anyio")),
    ("neuron servicer", ("neuron/server.py",)),
    ("engine loop (neuron)", ("neuron/engine/",)),
    ("vLLM client (AsyncLLM)", ("vllm/v1/engine/", "vllm/")),
    ("routing", ("cortex/routing/",)),
    ("event loop", ("asyncio/", "uvloop", "selectors.py")),
)


def stage_of(frames: list[str]) -> str:
    """The stage of one sample: frames root first, as py-spy's raw format."""
    for frame in reversed(frames):
        for stage, patterns in STAGES:
            if any(p in frame for p in patterns):
                return stage
    return "other"


def read_raw(path: Path) -> Counter[str]:
    """py-spy's raw (collapsed) output: `frame;frame;... count` a line."""
    stages: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stages[stage_of(stack.split(";"))] += int(count)
    return stages
