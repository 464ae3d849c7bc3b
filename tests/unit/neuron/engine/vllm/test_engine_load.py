"""The engine's load report: what vLLM's scheduler said after its last step,
kept by the stat logger the engine registers (no model is loaded)."""

from __future__ import annotations

from pathlib import Path

from vllm.v1.metrics.stats import SchedulerStats

from neuron.engine.base import EngineLoad
from neuron.engine.vllm.args import VllmOptions
from neuron.engine.vllm.engine import VllmEngine


def test_the_load_is_the_schedulers_last_report_with_its_kv_cache_usage() -> None:
    engine = VllmEngine(VllmOptions(served_id="unused", model_path=Path("/nonexistent")))
    assert engine.load() == EngineLoad(running=0, waiting=0, kv_cache_usage=0.0)
    # The stat logger factory is what the engine hands AsyncLLM at start.
    logger = engine._stats.factory(vllm_config=None)
    logger.record(
        scheduler_stats=SchedulerStats(num_running_reqs=3, num_waiting_reqs=2, kv_cache_usage=0.4),
        iteration_stats=None,
    )
    assert engine.load() == EngineLoad(running=3, waiting=2, kv_cache_usage=0.4)
