"""Priority classes, shared by cortex (admission) and the neuron (the
engine's own queue): three, highest first. A request asks for one (vLLM's
`priority` or OpenAI's `service_tier`), its tenant's `max_priority` caps it.

vLLM's priority scheduler runs the *lowest* number first, so `engine_priority`
maps the classes onto 0, 1, 2 in the same order as `CLASSES`.
"""

from __future__ import annotations

from typing import Literal, get_args

PriorityClass = Literal["interactive", "default", "batch"]
CLASSES: tuple[PriorityClass, ...] = get_args(PriorityClass)
DEFAULT_CLASS: PriorityClass = "default"


def rank(cls: PriorityClass) -> int:
    """0 for the highest class; a lower rank is admitted first."""
    return CLASSES.index(cls)


def capped(requested: PriorityClass, ceiling: PriorityClass) -> PriorityClass:
    """The request's class, lowered to its tenant's ceiling when above it."""
    return requested if rank(requested) >= rank(ceiling) else ceiling


def engine_priority(cls: PriorityClass) -> int:
    """The number vLLM's `scheduling_policy = "priority"` orders by."""
    return rank(cls)
