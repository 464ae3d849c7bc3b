"""What vLLM reports, in the neuron's own types: a new token's logprobs and
alternatives (`logprobs`), and the scheduler's counts after each step
(`SchedulerStatsSink`, what the neuron's Load answer reports)."""

from __future__ import annotations

from typing import Any

from neuron.engine.base import TokenLogprob, TopLogprob


def logprobs(
    token_ids: Any, entries: Any, top_k: int | None, tokenizer: Any
) -> tuple[TokenLogprob, ...]:
    """vLLM gives, per new token, {token id: Logprob}: the top-k alternatives
    (rank 1..k) and the sampled token (whatever its rank)."""
    if not entries or top_k is None:
        return ()
    out = []
    for token_id, entry in zip(token_ids, entries, strict=False):
        chosen = top(token_id, entry[token_id], tokenizer)
        ranked = sorted(entry.items(), key=lambda kv: kv[1].rank or 0)
        alternatives = tuple(
            top(t, lp, tokenizer) for t, lp in ranked if lp.rank is not None and lp.rank <= top_k
        )
        out.append(TokenLogprob(chosen.token, chosen.logprob, chosen.bytes, alternatives))
    return tuple(out)


def top(token_id: int, lp: Any, tokenizer: Any) -> TopLogprob:
    token = lp.decoded_token if lp.decoded_token is not None else tokenizer.decode([token_id])
    logprob = max(float(lp.logprob), -9999.0)  # -inf does not fit JSON
    return TopLogprob(token=token, logprob=logprob, bytes=token.encode())


class SchedulerStatsSink:
    """Keeps the latest scheduler counts that vLLM reports after each step."""

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0

    def factory(self, vllm_config: Any, engine_index: int = 0) -> Any:
        from vllm.v1.metrics.loggers import StatLoggerBase

        sink = self

        class _Logger(StatLoggerBase):  # type: ignore[misc]  # vLLM is Any to mypy
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats: Any, iteration_stats: Any, *a: Any, **k: Any) -> None:
                if scheduler_stats is not None:
                    sink.running = scheduler_stats.num_running_reqs
                    sink.waiting = scheduler_stats.num_waiting_reqs
                    sink.kv_cache_usage = float(scheduler_stats.kv_cache_usage)

            def log_engine_initialized(self) -> None:
                pass

        return _Logger(vllm_config, engine_index)
