"""schemathesis against a real cortex with sim neurons, auth off and on.

`make test` sends 400 generated requests (half to each cortex) across
every /v1 operation; `make fuzz` sends 20,000 (`make fuzz FUZZ_REQUESTS=N`;
here NEURAXIS_FUZZ_REQUESTS). Pass = no 5xx, every 4xx in the OpenAI
envelope with its status, a stream made of JSON events, no request left
without an answer past driver.REQUEST_TIMEOUT_S. The counts go to
bench/results/fuzz/<target>-<requests>.json and the end of pytest's
report; NEURAXIS_FUZZ_SEED replays a run (its seed is printed with them).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial

import pytest
import requests

from harness.gateway import Sim, running_cortex, sim_neurons
from harness.keys import new_key
from harness.polling import wait_until
from harness.procs import REPO, cortex_metric
from tests.fuzz.driver import Fuzzer, Tally, Target

DEFAULT_REQUESTS = 400
RESULTS = REPO / "bench" / "results" / "fuzz"
# Two generating sim neurons answering at once: the run measures cortex's
# answers, not the engine's pace. A large max_tokens still costs a loop.
SIM = ["--sim-ttft-s", "0", "--sim-itl-s", "0"]
MODELS = ("sim-a", "sim-b")
UP = "neuraxis_replica_up"

# The test's property that carries its line for pytest's terminal summary
# (conftest.py prints them): a report's properties reach the main process
# from an xdist worker, a module's list would not.
REPORT = "fuzz counts"


@dataclass(frozen=True)
class Cluster:
    off: Target
    on: Target


def _requests() -> int:
    return int(os.environ.get("NEURAXIS_FUZZ_REQUESTS", DEFAULT_REQUESTS))


def _seed() -> int:
    return int(os.environ.get("NEURAXIS_FUZZ_SEED") or random.randrange(1 << 32))


def _all_up(admin_url: str, neurons: list[str]) -> bool:
    return all(cortex_metric(admin_url, UP, replica=a) == 1.0 for a in neurons)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two sim neurons and two cortexes in front of them: auth off, and
    auth required with one key."""
    logs = tmp_path_factory.mktemp("fuzz-logs")
    state = tmp_path_factory.mktemp("fuzz-state")
    with ExitStack() as stack:
        sims = [Sim(served_id, SIM) for served_id in MODELS]
        neurons = [n.address for n in stack.enter_context(sim_neurons(logs, "fuzz", sims))]
        cortexes = []
        for label, extra in (("off", []), ("on", ["--auth", "required"])):
            args = [*extra, "--state-dir", str(state / label)]
            cortexes.append(
                stack.enter_context(
                    running_cortex(logs / f"cortex-{label}.log", neurons, *args, ready=None)
                )
            )
        for running in cortexes:
            running.wait_ready()
            # /readyz answers once one neuron is ready; a model whose neuron
            # is still starting gets a (right) 503, which the fuzz counts
            # as a failure: a make test run started one 3 s after the other.
            assert wait_until(partial(_all_up, running.admin_url, neurons), 60), neurons
        off, on = (c.base_url for c in cortexes)
        key = new_key(state / "on", "fuzz")
        yield Cluster(Target("auth-off", off, MODELS), Target("auth-on", on, MODELS, key))


def _report(target: Target, tally: Tally, run_seed: int) -> str:
    summary = {"target": target.label, "seed": run_seed, **tally.summary()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    # Named by the run's size: make test's run never replaces make fuzz's.
    name = f"{target.label}-{_requests()}.json"
    (RESULTS / name).write_text(json.dumps(summary, indent=2))
    statuses = ", ".join(f"{s}: {n}" for s, n in summary["by_status"].items())
    return (
        f"fuzz {target.label}: {tally.requests} requests in {summary['seconds']} s "
        f"(seed {run_seed}); {statuses}; 5xx {tally.server_errors}; "
        f"failures {len(tally.failures)}"
    )


@pytest.mark.parametrize("auth", ["off", "on"])
def test_no_generated_request_gets_a_5xx_or_a_bare_error(
    cluster: Cluster, auth: str, record_property: Callable[[str, object], None]
) -> None:
    target = cluster.off if auth == "off" else cluster.on
    budget = _requests() // 2
    run_seed = _seed()
    with requests.Session() as session:
        tally = Fuzzer(target, session).run(budget, run_seed)
    record_property(REPORT, _report(target, tally, run_seed))
    # Every /v1 operation was asked, and (nearly) the whole budget was sent:
    # an operation schemathesis runs out of cases for leaves its share to
    # the next.
    assert len(tally.by_operation) >= 10, tally.by_operation
    assert tally.requests >= budget * 0.95, tally.summary()
    shown = "\n".join(
        f"{f.operation}: {'; '.join(f.problems)}\n  {f.curl[:2000]}" for f in tally.failures[:20]
    )
    assert not tally.failures, f"{len(tally.failures)} failures (seed {run_seed}):\n{shown}"
