"""The sim engine's log probabilities: what benchmarks of large answers
(bench/edge_stalls.py) and the API's logprobs paths need from a double."""

from __future__ import annotations

from neuron.engine.base import EngineRequest, Message, Sampling
from neuron.engine.sim import SimEngine, SimOptions


async def _choices(logprobs: int | None) -> list[tuple[str, int, list[str]]]:
    engine = SimEngine(SimOptions(served_id="m", ttft_s=0, itl_s=0))
    request = EngineRequest(
        request_id="r",
        model="m",
        messages=(Message(role="user", content="hi"),),
        sampling=Sampling(max_tokens=3, n=2, logprobs=logprobs),
    )
    seen = []
    async for out in engine.generate(request):
        for choice in out.choices:
            for entry in choice.logprobs:
                seen.append((entry.token, choice.index, [t.token for t in entry.top]))
            assert choice.logprobs or logprobs is None
    return seen


async def test_each_token_of_each_choice_has_k_alternatives_the_token_first() -> None:
    seen = await _choices(3)
    assert len(seen) == 3 * 2
    assert seen[0] == ("tok0", 0, ["tok0", " alt1", " alt2"])
    assert all(len(top) == 3 and top[0] == token for token, _, top in seen)


async def test_no_logprobs_unless_asked() -> None:
    assert await _choices(None) == []


async def test_logprobs_without_alternatives() -> None:
    seen = await _choices(0)
    assert len(seen) == 3 * 2 and all(top == [] for _, _, top in seen)
