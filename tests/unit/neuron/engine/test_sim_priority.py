"""The sim engine's queue past `max_running`: by class when it schedules by
priority (as vLLM's scheduling_policy = "priority"), else arrival order."""

from __future__ import annotations

import asyncio

from axon.priority import PriorityClass
from harness.clock import until
from neuron.engine.base import EngineRequest, Message, Sampling
from neuron.engine.sim import SimEngine, SimOptions


async def _first_tokens(by_priority: bool) -> list[str]:
    engine = SimEngine(
        SimOptions(served_id="m", ttft_s=0, itl_s=0, max_running=1, by_priority=by_priority)
    )
    started: list[str] = []
    gate = asyncio.Event()

    async def run(name: str, cls: PriorityClass) -> None:
        request = EngineRequest(
            request_id=name,
            model="m",
            messages=(Message(role="user", content="hi"),),
            sampling=Sampling(max_tokens=2),
            priority=cls,
        )
        async for _ in engine.generate(request):
            if not started or started[-1] != name:
                started.append(name)
            await gate.wait()  # the first holds the only slot until all queued

    first = asyncio.create_task(run("first", "default"))
    await until(lambda: started == ["first"])
    rest = []
    for name, cls in [("batch", "batch"), ("default", "default"), ("interactive", "interactive")]:
        rest.append(asyncio.create_task(run(name, cls)))  # type: ignore[arg-type]
        await until(lambda: engine.load().waiting == len(rest))
    gate.set()
    await asyncio.gather(first, *rest)
    return started


async def test_by_priority_the_highest_class_runs_first() -> None:
    assert await _first_tokens(True) == ["first", "interactive", "default", "batch"]


async def test_first_come_first_served_otherwise() -> None:
    assert await _first_tokens(False) == ["first", "batch", "default", "interactive"]
