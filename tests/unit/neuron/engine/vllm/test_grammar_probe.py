"""The grammar probe (issue 31 point 3): a grammar compiled in a child
process within a bound, the child killed past it or when the request is
cancelled, a new one for the next request; what it cannot judge is left to
vLLM. The child's compile is a stand-in that waits on a marker file (an
xgrammar compile's time depends on the machine), and once xgrammar's own,
over a vocabulary of ten tokens."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.polling import wait_until
from neuron.engine.vllm.grammar_probe import JSON, REGEX, CompileTimeoutError, GrammarProbe
from tests.unit.neuron.engine.vllm.probe_fakes import held_compiler


@pytest.fixture
def release(tmp_path: Path) -> Path:
    return tmp_path / "release"


async def test_a_compile_within_the_bound_passes_and_the_child_stays(release: Path) -> None:
    probe = GrammarProbe(30.0, str(release), held_compiler)
    try:
        await probe.check(JSON, "quick")
        child = probe.child
        await probe.check(JSON, "fail")  # vLLM will say why
        assert child is not None and probe.child is child and child.is_alive()
    finally:
        probe.close()


async def test_a_compile_past_the_bound_is_refused_and_its_child_killed(release: Path) -> None:
    probe = GrammarProbe(0.5, str(release), held_compiler)
    try:
        await probe.check(JSON, "quick")  # started: its start-up is not timed
        child = probe.child
        with pytest.raises(CompileTimeoutError):
            await probe.check(JSON, "held")
        assert child is not None and not child.is_alive()
        await probe.check(JSON, "quick")  # a new child
        assert probe.child is not None and probe.child is not child
    finally:
        probe.close()


async def test_a_cancelled_request_kills_its_compile(release: Path) -> None:
    probe = GrammarProbe(300.0, str(release), held_compiler)
    try:
        await probe.check(JSON, "quick")
        child = probe.child
        task = asyncio.create_task(probe.check(JSON, "held"))
        await asyncio.sleep(0)  # the task sends the grammar to the child
        assert wait_until(Path(f"{release}.started").exists, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert child is not None and wait_until(lambda: not child.is_alive(), 5)
    finally:
        probe.close()


async def test_xgrammar_compiles_in_the_child() -> None:
    import xgrammar as xgr

    vocab = ["a", "b", "{", "}", '"', ":", ",", " ", "x", "1"]
    setup = xgr.TokenizerInfo(encoded_vocab=vocab).serialize_json()
    probe = GrammarProbe(60.0, setup)
    try:
        await probe.check(JSON, '{"type": "object", "properties": {"x": {"type": "integer"}}}')
        await probe.check(REGEX, "a+b")
        assert probe.child is not None and probe.child.is_alive()
    finally:
        probe.close()


async def test_warm_starts_the_child_before_any_request_and_close_ends_it(release: Path) -> None:
    probe = GrammarProbe(30.0, str(release), held_compiler)
    probe.warm()
    await asyncio.sleep(0)  # the warming task starts the child process
    child = probe.child
    assert child is not None and wait_until(child.is_alive, 10)
    await probe.check(JSON, "quick")
    assert probe.child is child
    probe.close()
    assert not child.is_alive()
    await probe.check(JSON, "held")  # closed: nothing is probed any more
