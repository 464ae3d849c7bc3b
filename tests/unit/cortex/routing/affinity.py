"""What the prefix-affinity tests share: four neurons' addresses, a small
hasher, requests and routes, candidates, the ring order of a prefix, and
dispatching through the policy as the pool does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from axon.v1 import neuron_pb2 as pb
from cortex.routing.policy import Candidate, Decision, Outcome, RouteHints, RouteRequest
from cortex.routing.prefix import PrefixHasher
from cortex.routing.prefix_affinity import PrefixAffinity
from cortex.routing.ring import HashRing

ADDRESSES = [f"aff-{i}:1" for i in range(4)]
HASHER = PrefixHasher(block_bytes=16, max_blocks=8)


def chat(system: str, *turns: str) -> pb.GenerateRequest:
    messages = [pb.ChatMessage(role="system", content=system)]
    messages += [pb.ChatMessage(role="user", content=t) for t in turns]
    return pb.GenerateRequest(model="m", messages=messages)


def route(
    prefix: tuple[int, ...] = (),
    *,
    request_id: str = "req",
    now: float = 100.0,
    previous: str | None = None,
) -> RouteRequest:
    return RouteRequest(
        model="m",
        request_id=request_id,
        now=now,
        hints=RouteHints(previous_response_id=previous),
        prefix=prefix,
    )


def idle(addresses: Sequence[str] = ADDRESSES) -> list[Candidate]:
    return [Candidate(address=a, outstanding=0) for a in addresses]


def changed(candidates: list[Candidate], address: str, **changes: Any) -> list[Candidate]:
    """The candidates with the one at `address` changed."""
    return [replace(c, **changes) if c.address == address else c for c in candidates]


def ring(prefix: tuple[int, ...], addresses: Sequence[str] = ADDRESSES) -> list[str]:
    """The ring order the policy walks for this prefix."""
    return list(HashRing(addresses).walk(prefix[0]))


def dispatch(policy: PrefixAffinity, candidates: list[Candidate], route: RouteRequest) -> str:
    chosen = policy.select(candidates, route)
    policy.on_dispatch(chosen, route)
    return chosen.address


def in_turn(policy: PrefixAffinity, candidates: list[Candidate], route: RouteRequest) -> str:
    """Dispatched, then complete before the next request."""
    address = dispatch(policy, candidates, route)
    policy.on_complete(address, route, Outcome.OK)
    return address


def decision(
    policy: PrefixAffinity, candidates: list[Candidate], route: RouteRequest
) -> tuple[str, Decision]:
    choice = policy.choose(candidates, route)
    return choice.candidate.address, choice.decision
