"""The spans of a request's way through the pool, and their attributes:
the admission wait (whose request, in which class, at what cost) and each
attempt on a neuron. Nothing is built when tracing is off."""

from __future__ import annotations

from axon import tracing
from axon.v1 import neuron_pb2 as pb
from cortex.routing.admission import Claim

# What the pool sends a neuron.
Request = pb.GenerateRequest | pb.EmbedRequest | pb.TokenizeRequest | pb.DetokenizeRequest


def attempt_span(request: Request, address: str, attempt: int) -> tracing.Span | None:
    """The span of one attempt (None: tracing off), a child of the current
    one (the HTTP request's)."""
    if not tracing.enabled():
        return None
    return tracing.start(
        "neuraxis.attempt",
        {
            "neuraxis.attempt": attempt,
            "neuraxis.neuron": address,
            "neuraxis.request_id": request.request_id,
            "gen_ai.request.model": request.model,
        },
    )


def admission_attributes(request: Request, claim: Claim) -> tracing.Attributes | None:
    """The admission span's: whose request waits and in which class (its
    tenant and the class after its tenant's cap), with its estimated cost
    in the fair queue's tokens; None, and nothing built, when not tracing."""
    if not tracing.enabled():
        return None
    return {
        "gen_ai.request.model": request.model,
        "neuraxis.tenant": claim.tenant,
        "neuraxis.priority": claim.cls,
        "neuraxis.admission.cost_tokens": claim.cost,
    }
