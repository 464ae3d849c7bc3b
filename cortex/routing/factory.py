"""Routing policies by name: the names a setting may use, and the factory.

Kept apart from `policy.py` because it imports every policy module, while
each of those imports the interface.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from cortex.routing.least_outstanding import LeastOutstanding
from cortex.routing.policy import RoutingPolicy


class PolicyName(enum.StrEnum):
    LEAST_OUTSTANDING = "least_outstanding"


DEFAULT_POLICY = PolicyName.LEAST_OUTSTANDING

_BUILDERS: dict[PolicyName, Callable[[], RoutingPolicy]] = {
    PolicyName.LEAST_OUTSTANDING: LeastOutstanding,
}


def make_policy(name: str = DEFAULT_POLICY) -> RoutingPolicy:
    """A new policy (its own state) of the named kind; ValueError names the
    known ones when `name` is not one of them."""
    try:
        kind = PolicyName(name)
    except ValueError:
        known = ", ".join(p.value for p in PolicyName)
        raise ValueError(f"unknown routing policy {name!r}; known: {known}") from None
    return _BUILDERS[kind]()
