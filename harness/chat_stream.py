"""Streamed chat through any OpenAI-compatible server, timed chunk by chunk,
and the CPU time a server's processes spend meanwhile.

A `Batch` is N requests at concurrency c against one server: per request the
time to the first content chunk, the gaps between content chunks (inter-token
latency, as vLLM's own benchmark counts it: one gap per chunk after the
first) and the output tokens from the final usage chunk; for the batch its
wall time and the CPU seconds of the server's process tree (psutil: user +
system of every process under the root, grouped by role).

What does not live here: which servers, and the A/B order (vs_vllm.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil

from harness import streamed_chat
from harness.workload import PROMPTS, chat_body, gathered

# What a process is, from its command line: the roles whose CPU the report
# shows apart (the first that matches wins).
ROLES = (
    ("EngineCor", "engine core"),  # retitled "VLLM::EngineCore", cut to 15 by the kernel
    ("VLLM::Worker", "model worker"),  # the CPU engine's worker process, retitled
    ("neuron serve", "neuron"),
    ("neuraxis.cli neuron", "neuron"),
    ("cortex", "cortex"),
    ("vllm.entrypoints", "vLLM API server"),
    ("ray", "ray"),
)


@dataclass(frozen=True)
class Stream:
    """One streamed request as the client saw it."""

    ttft_s: float
    gaps_s: tuple[float, ...]
    tokens: int


@dataclass
class Batch:
    streams: list[Stream]
    wall_s: float
    cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.streams)


async def stream_chat(client: httpx.AsyncClient, base: str, body: dict[str, Any]) -> Stream:
    seen = await streamed_chat.read(client, f"{base}{streamed_chat.CHAT_PATH}", body)
    seen.raise_if_cut()
    if seen.ttft is None:
        raise RuntimeError(f"{base}: a stream without content")
    return Stream(ttft_s=seen.ttft, gaps_s=seen.gaps, tokens=seen.completion_tokens)


class CpuMeter:
    """CPU seconds of a process tree, by role, between `start` and `stop`.
    A process that appears meanwhile counts from zero; one that ends
    meanwhile loses what it used since `start` (none does under load)."""

    def __init__(self, root_pid: int | None) -> None:
        self._root = psutil.Process(root_pid) if root_pid else None
        self._before: dict[int, float] = {}

    def _tree(self) -> dict[int, tuple[str, float]]:
        if self._root is None:
            return {}
        found: dict[int, tuple[str, float]] = {}
        for p in [self._root, *self._root.children(recursive=True)]:
            try:
                times = p.cpu_times()
                found[p.pid] = (role(" ".join(p.cmdline()), p.name()), times.user + times.system)
            except psutil.Error:
                continue
        return found

    def start(self) -> None:
        self._before = {pid: cpu for pid, (_, cpu) in self._tree().items()}

    def stop(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for pid, (name, cpu) in self._tree().items():
            used[name] = used.get(name, 0.0) + cpu - self._before.get(pid, 0.0)
        return used


def role(cmdline: str, name: str) -> str:
    """A process's role from its command line or, where a process retitled
    itself (vLLM's engine core), the 15 characters the kernel keeps."""
    for needle, role_name in ROLES:
        if needle in cmdline or needle in name:
            return role_name
    return f"other ({name})"


async def run_batch(
    base: str,
    model: str,
    concurrency: int,
    requests: int,
    max_tokens: int,
    extra: Mapping[str, Any],
    meter: CpuMeter,
) -> Batch:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def one(i: int) -> Stream:
            body = chat_body(model, PROMPTS[i % len(PROMPTS)], max_tokens, extra)
            return await stream_chat(client, base, body)

        meter.start()
        streams, wall = await gathered(requests, concurrency, one)
        cpu = meter.stop()
    return Batch(streams, wall, cpu)
