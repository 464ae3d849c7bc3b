"""Autoscaling benchmark: one load trace (a ramp, a plateau, a spike, an idle
stretch) sent at the same time to two models of one simulated Ray cluster
on this machine: `auto`, autoscaled from 0 to the peak, and `fixed`, a
deployment sized for the peak. Reports the replicas over time against the
load (plot), TTFT p50/p99 per phase for each, the failed requests and the
replica-seconds each used.

Targets (issue 27): 0 failed requests; the autoscaled model uses at most
60 % of the fixed deployment's replica-seconds, with its plateau TTFT p99
within 1.5x the fixed one's.

    make bench-autoscale
    python -m bench.autoscale --smoke    # a short trace (make test)
"""

from __future__ import annotations

import itertools
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench_stack import output_path, parser, write_summary
from harness.comparison import percentile
from harness.plots import line_plot, markdown_table, write_markdown
from harness.sim_cluster import SimCluster, sim_cluster
from harness.sim_specs import autoscaled_spec
from harness.streaming_load import Load, Outcome

AUTO, FIXED = "auto", "fixed"
# One replica carries this many streams by the autoscaler's target.
TARGET = 2
MAX_TOKENS = 30  # ~0.7 s a request at 20 ms a token


# phase, model, requests, failed, TTFT p50 and p99 (ms)
Row = tuple[str, str, int, int, float, float]


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    clients: int  # closed-loop clients at the phase's end (a ramp climbs to it)
    ramp: bool = False


TRACE = [
    Phase("ramp", 40, 6, ramp=True),
    Phase("plateau", 60, 6),
    Phase("spike", 15, 8),
    Phase("idle", 90, 0),
]
SMOKE_TRACE = [
    Phase("ramp", 4, 2, ramp=True),
    Phase("plateau", 3, 2),
    Phase("spike", 2, 4),
    Phase("idle", 1, 0),
]


def spec(peak: int, idle_s: float) -> str:
    engine = (
        '[models.engine]\nkind = "sim"\nsim_ttft_s = 0.05\nsim_itl_s = 0.02\nsim_load_s = 1.0\n'
    )
    autoscale = (
        f"min_replicas = 0\nmax_replicas = {peak}\ntarget_in_flight = {TARGET}\n"
        f"scale_up_after_s = 2\nscale_down_after_s = 15\nscale_to_zero_after_s = {idle_s:g}"
    )
    return autoscaled_spec(AUTO, autoscale, engine="sim_load_s = 1.0") + (
        f'[[models]]\nid = "{FIXED}"\nsource = "sim"\ngenerations = ["cpu"]\n'
        f"replicas = {peak}\n{engine}"
    )


class Sampler:
    """The replicas each model holds (any state: they hold their GPUs), every
    `every_s`, from the controller's status."""

    def __init__(self, cluster: SimCluster, every_s: float = 0.5) -> None:
        self.points: dict[str, list[tuple[float, int, int]]] = {AUTO: [], FIXED: []}
        self._cluster = cluster
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic() - self.started
            for model in self.points:
                status = self._cluster.model(model)
                ready = sum(1 for r in status["replicas"] if r["state"] == "ready")
                self.points[model].append((now, len(status["replicas"]), ready))
            self._stop.wait(self._every)

    def replica_seconds(self, model: str) -> float:
        points = self.points[model]
        return sum(held * (after[0] - at) for (at, held, _), after in itertools.pairwise(points))


def run_trace(
    cluster: SimCluster, trace: list[Phase], clients_log: list[tuple[float, int]], started: float
) -> tuple[dict[str, tuple[float, float]], dict[str, list[Outcome]]]:
    """Send the trace to both models at once (the same closed-loop clients
    for each); each phase's start and end, and every request's outcome."""
    windows: dict[str, tuple[float, float]] = {}
    every: list[Load] = []
    running: list[list[Load]] = []  # a client of each model, per client
    try:
        for phase in trace:
            begin = time.monotonic()
            wants = range(len(running) + 1, phase.clients + 1) if phase.ramp else [phase.clients]
            for want in wants or [phase.clients]:
                while len(running) < want:
                    pair = [Load(cluster.base_url, m, 1, MAX_TOKENS) for m in (AUTO, FIXED)]
                    running.append([load.__enter__() for load in pair])
                    every += pair
                _stop([load for pair in running[want:] for load in pair])
                del running[want:]
                clients_log.append((time.monotonic() - started, len(running)))
                time.sleep(phase.seconds / max(len(wants), 1))
            windows[phase.name] = (begin, time.monotonic())
    finally:
        _stop([load for pair in running for load in pair])
    outcomes: dict[str, list[Outcome]] = {AUTO: [], FIXED: []}
    for index, load in enumerate(every):
        outcomes[(AUTO, FIXED)[index % 2]] += load.outcomes
    return windows, outcomes


def _stop(loads: list[Load]) -> None:
    """Stop the clients of `loads` together (each ends its request first)."""
    stoppers = [threading.Thread(target=load.__exit__, args=(None, None, None)) for load in loads]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join()


def phase_rows(
    outcomes: dict[str, list[Outcome]], windows: dict[str, tuple[float, float]]
) -> list[Row]:
    rows: list[Row] = []
    for name, (begin, end) in windows.items():
        for model in (AUTO, FIXED):
            mine = [o for o in outcomes[model] if begin <= o.started_at < end]
            ttfts = [o.ttft * 1000 for o in mine if o.ttft is not None]
            failed = sum(1 for o in mine if not o.finished)
            p50 = percentile(ttfts, 50) if ttfts else float("nan")
            p99 = percentile(ttfts, 99) if ttfts else float("nan")
            rows.append((name, model, len(mine), failed, p50, p99))
    return rows


def steps(changes: list[tuple[float, int]], per: int) -> list[tuple[float, float]]:
    """The client count as a step line (held until each change), over `per`."""
    points: list[tuple[float, float]] = []
    for t, n in changes:
        if points:
            points.append((t, points[-1][1]))
        points.append((t, n / per))
    return points


def main(argv: list[str] | None = None) -> None:
    cli = parser(__doc__)
    args = cli.parse_args(argv)
    trace = SMOKE_TRACE if args.smoke else TRACE
    peak = max(p.clients for p in trace) // TARGET
    idle_s = 5.0 if args.smoke else 30.0
    out = output_path(args, "autoscale")
    folder = out.parent if out is not None else None
    work = Path(tempfile.mkdtemp(prefix="neuraxis-bench-autoscale-"))
    clients_log: list[tuple[float, int]] = []
    # One CPU node holds every sim replica (they take no GPU): the lightest
    # cluster on a loaded machine.
    with sim_cluster(spec(peak, idle_s), work, ("cpu",), wait_for_model=FIXED) as cluster:
        cluster.wait_ready(FIXED, peak, timeout=120)
        with Sampler(cluster) as sampler:
            windows, outcomes = run_trace(cluster, trace, clients_log, sampler.started)
        used = {m: sampler.replica_seconds(m) for m in (AUTO, FIXED)}
        points = sampler.points
    rows = phase_rows(outcomes, windows)
    ratio = used[AUTO] / used[FIXED] if used[FIXED] else float("nan")
    plateau = {r[1]: r[5] for r in rows if r[0] == "plateau"}
    summary: dict[str, Any] = {
        "trace": [p.__dict__ for p in trace],
        "phases": rows,
        "replica_seconds": used,
        "replica_seconds_ratio": ratio,
        "plateau_ttft_p99_ratio": plateau[AUTO] / plateau[FIXED],
        "failed": sum(r[3] for r in rows),
        "replicas_over_time": points,
        "clients_over_time": clients_log,
    }
    table = markdown_table(
        ["phase", "model", "requests", "failed", "TTFT p50 (ms)", "TTFT p99 (ms)"], rows
    )
    lines = [
        table,
        "",
        f"replica-seconds: auto {used[AUTO]:.0f}, fixed (peak {peak}) {used[FIXED]:.0f}: "
        f"{ratio:.0%} (target <= 60 %)",
        f"plateau TTFT p99 auto/fixed: {summary['plateau_ttft_p99_ratio']:.2f} (target <= 1.5)",
        f"failed requests: {summary['failed']} (target 0)",
    ]
    print("\n".join(lines))
    if folder is not None:
        write_summary(out, summary)
        write_markdown(folder, "autoscale", "\n".join(lines) + "\n")
        line_plot(
            folder,
            "autoscale_replicas",
            {
                "auto: replicas": [(t, held) for t, held, _ in points[AUTO]],
                "fixed: replicas": [(t, held) for t, held, _ in points[FIXED]],
                "clients per model / target": steps(clients_log, TARGET),
            },
            "seconds",
            "replicas",
            "Replicas over time against the load",
        )


if __name__ == "__main__":
    main()
