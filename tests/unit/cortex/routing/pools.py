"""What the pool's tests share: policies that show where each attempt
went, a pool of in-memory neurons, and its requests and streams read back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

from axon.v1 import neuron_pb2 as pb
from cortex.routing.admission import AdmissionOptions, Sleep
from cortex.routing.deadlines import Deadlines
from cortex.routing.ejection import EjectionOptions
from cortex.routing.factory import PolicyTable
from cortex.routing.policy import Candidate, Outcome, RouteRequest, RoutingPolicy
from cortex.routing.pool import NeuronPool
from cortex.routing.pool_settings import PoolSettings
from cortex.routing.prefix import PrefixHasher
from cortex.routing.retry_budget import RetryBudgetOptions
from tests.unit.cortex.routing.fakes import FakeNeuron, Fleet


class InOrder(RoutingPolicy):
    """Takes the first candidate (the pool's order), so that a test knows
    which neuron an attempt goes to; records what it was shown and told."""

    def __init__(self) -> None:
        self.seen: list[tuple[RouteRequest, list[tuple[str, int]]]] = []
        self.dispatched: list[tuple[str, int]] = []
        self.completed: list[tuple[str, int, Outcome]] = []

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        self.seen.append((request, [(c.address, c.outstanding) for c in candidates]))
        return candidates[0]

    def on_dispatch(self, candidate: Candidate, request: RouteRequest) -> None:
        self.dispatched.append((candidate.address, request.attempt))

    def on_complete(self, address: str, request: RouteRequest, outcome: Outcome) -> None:
        self.completed.append((address, request.attempt, outcome))


class Recorder(InOrder):
    """InOrder that keeps the whole candidates and routes it was shown, and
    may ask for prefix hashes."""

    def __init__(self, hasher: PrefixHasher | None = None) -> None:
        super().__init__()
        self.prefix_hasher = hasher
        self.candidates: list[list[Candidate]] = []
        self.routes: list[RouteRequest] = []

    def select(self, candidates: Sequence[Candidate], request: RouteRequest) -> Candidate:
        self.candidates.append(list(candidates))
        self.routes.append(request)
        return super().select(candidates, request)


def fake_pool(
    neurons: Sequence[FakeNeuron],
    *,
    policy: RoutingPolicy | PolicyTable | None = None,
    clock: Callable[[], float] = lambda: 100.0,
    expected: Sequence[str] = ("m",),
    fleet: Fleet | None = None,
    timeout_s: float = 5.0,
    deadlines: Deadlines | None = None,
    poll_interval_s: float = 0.05,
    load_interval_s: float = 0.5,
    max_retries: int = 1,
    ejection: EjectionOptions | None = None,
    retry_budget: RetryBudgetOptions | None = None,
    admission: AdmissionOptions | None = None,
    sleep: Sleep = asyncio.sleep,
) -> NeuronPool:
    """A pool of `neurons` (and of those `fleet` makes for the endpoint
    table) on a clock standing at 100 unless one is given, every deadline
    `timeout_s` unless `deadlines` says otherwise."""
    t = timeout_s
    return NeuronPool(
        neurons,
        expected_models=list(expected),
        deadlines=deadlines or Deadlines(first_token_s=t, idle_s=t, total_s=t),
        settings=PoolSettings(
            poll_interval_s=poll_interval_s,
            load_interval_s=load_interval_s,
            max_retries=max_retries,
        ),
        client_factory=fleet or Fleet(),
        policy=policy,
        clock=clock,
        ejection=ejection,
        retry_budget=retry_budget,
        admission=admission,
        sleep=sleep,
    )


async def polled(pool: NeuronPool) -> NeuronPool:
    """The pool once it has asked every neuron for its Info."""
    await pool.refresh()
    return pool


def request(model: str = "m", request_id: str = "req-1") -> pb.GenerateRequest:
    return pb.GenerateRequest(request_id=request_id, model=model)


async def texts(stream: AsyncIterator[pb.GenerateResponse]) -> list[str]:
    return [c.text async for r in stream for c in r.choices]


async def first_message(stream: AsyncIterator[pb.GenerateResponse]) -> pb.GenerateResponse:
    """Read the first message, leaving the stream (and its dispatch) open."""
    return await anext(stream)
