"""Modes measured in paired rounds (cortex with and without auth, tracing,
metrics; two request paths): each round runs every mode twice, A B B A, the
next round rotated (B A A B; with three modes B C A A C B, ...), so that the
drift of a shared machine falls on every mode alike. From four modes on, the
rounds follow Williams' design (A B D C C D B A, then B C A D D A C B, ...):
over as many rounds as modes, every mode runs right after every other one
equally often, so the aftermath of a heavy mode's run falls on all the
others alike (plain rotation put the same two after it every round). Besides the runs, each
mode's CPU seconds where the caller says how to read them, and the paired
difference of two modes within each round, less exposed to that drift than
the pooled figures."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # workload.compare measures in paired rounds too
    from harness.workload import Run


@dataclass
class Paired:
    # Per round, each mode's two runs.
    rounds: list[dict[str, list[Run]]] = field(default_factory=list)
    # Per mode, the CPU seconds read around its runs (0 when not read).
    cpu_s: dict[str, float] = field(default_factory=dict)

    def runs(self, mode: str) -> list[Run]:
        return [run for one in self.rounds for run in one[mode]]

    def ttfts(self, mode: str) -> list[float]:
        """Every request's TTFT in the mode's runs, in seconds."""
        return [t for run in self.runs(mode) for t in run.ttfts]

    def medians(self, mode: str) -> dict[str, float]:
        """The median over the mode's runs of their TTFT p50 (ms) and of
        their output tokens/s."""
        runs = self.runs(mode)
        return {
            "ttft_p50_ms": statistics.median(statistics.median(r.ttfts) for r in runs) * 1000,
            "tokens_per_s": statistics.median(r.tokens_per_s for r in runs),
        }

    def added_ttft_ms(self, mode: str, baseline: str) -> float:
        """The median over rounds of the mode's TTFT p50 minus the baseline's
        in the same round (each the mean of its two runs' p50s)."""

        def p50(runs: list[Run]) -> float:
            return statistics.mean(statistics.median(run.ttfts) for run in runs)

        return statistics.median(p50(one[mode]) - p50(one[baseline]) for one in self.rounds) * 1000

    def paired_ratios(self, mode: str, baseline: str) -> dict[str, float]:
        """The median over rounds of the mode's TTFT p50 and output tokens/s
        over the baseline's in the same round (each the mean of its runs)."""

        def ratio(figure: Callable[[Run], float], one: dict[str, list[Run]]) -> float:
            return statistics.mean(map(figure, one[mode])) / statistics.mean(
                map(figure, one[baseline])
            )

        def p50(run: Run) -> float:
            return statistics.median(run.ttfts)

        def tokens_per_s(run: Run) -> float:
            return run.tokens_per_s

        return {
            "ttft_p50": statistics.median(ratio(p50, one) for one in self.rounds),
            "tokens_per_s": statistics.median(ratio(tokens_per_s, one) for one in self.rounds),
        }


def paired_rounds(
    modes: Sequence[str],
    rounds: int,
    measure: Callable[[str], Run],
    label: str,
    cpu_s: Callable[[str], float] | None = None,
) -> Paired:
    """`rounds` rounds of `measure(mode)`; each run printed after `label`.
    `cpu_s(mode)`, when given, reads the CPU seconds the mode's process has
    used so far: its share is counted around each of its runs."""
    paired = Paired(cpu_s=dict.fromkeys(modes, 0.0))
    for r in range(rounds):
        order = _order(modes, r)
        runs: dict[str, list[Run]] = {mode: [] for mode in modes}
        for mode in order + order[::-1]:
            before = cpu_s(mode) if cpu_s is not None else 0.0
            result = measure(mode)
            if cpu_s is not None:
                paired.cpu_s[mode] += cpu_s(mode) - before
            runs[mode].append(result)
            ttft_ms = statistics.median(result.ttfts) * 1000
            print(
                f"  {label} {mode:<10} ttft p50 {ttft_ms:7.2f} ms  {result.tokens_per_s:8.1f} "
                f"tok/s  ({result.tokens} tokens, {result.wall_s:.1f} s)",
                flush=True,
            )
        paired.rounds.append(runs)
    return paired


def _order(modes: Sequence[str], r: int) -> list[str]:
    """Round `r`'s first half: Williams' row 0, 1, n-1, 2, n-2, ... shifted
    by `r` (up to three modes, the plain rotation)."""
    n = len(modes)
    row = [0]
    low, high = 1, n - 1
    while low <= high:
        row.append(low)
        if low != high:
            row.append(high)
        low, high = low + 1, high - 1
    return [modes[(i + r) % n] for i in row]
