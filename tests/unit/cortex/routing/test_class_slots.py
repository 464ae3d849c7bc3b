"""The batch rules on their own: the reserve kept for the classes above
batch, the trickle while they are busy, one batch request always allowed,
per replica, and no cap at all."""

from __future__ import annotations

import pytest

from axon.priority import PriorityClass
from cortex.routing.class_slots import BatchRules, ModelSlots, may_take

RULES = BatchRules(reserved_slots=1, trickle_slots=2)


def _slots(free: int | None, batch: int = 1, busy: bool = False, replicas: int = 1) -> ModelSlots:
    return ModelSlots(free=free, replicas=replicas, batch_running=batch, others_busy=busy)


@pytest.mark.parametrize("cls", ["interactive", "default"])
def test_the_classes_above_batch_take_any_free_slot(cls: PriorityClass) -> None:
    assert may_take(cls, _slots(1, batch=5, busy=True), RULES)
    assert not may_take(cls, _slots(0), RULES)
    assert may_take(cls, _slots(None, batch=5, busy=True), RULES)


def test_batch_leaves_the_reserve_free() -> None:
    assert may_take("batch", _slots(2), RULES)
    assert not may_take("batch", _slots(1), RULES)
    assert not may_take("batch", _slots(0, batch=0), RULES)


def test_one_batch_request_may_always_run_on_a_free_slot() -> None:
    # A cap at the reserve, or steady traffic above it: batch still moves.
    assert may_take("batch", _slots(1, batch=0), RULES)
    assert may_take("batch", _slots(1, batch=0, busy=True), BatchRules(4, 1))


def test_beside_busier_classes_batch_trickles() -> None:
    assert may_take("batch", _slots(10, batch=1, busy=True), RULES)
    assert not may_take("batch", _slots(10, batch=2, busy=True), RULES)
    assert may_take("batch", _slots(10, batch=2, busy=False), RULES)
    # No cap at all (the engine reports no batch size): the trickle still holds.
    assert not may_take("batch", _slots(None, batch=2, busy=True), RULES)
    assert may_take("batch", _slots(None, batch=50, busy=False), RULES)


def test_the_rules_are_per_ready_replica() -> None:
    assert not may_take("batch", _slots(3, replicas=3), RULES)
    assert may_take("batch", _slots(4, replicas=3), RULES)
    assert may_take("batch", _slots(10, batch=5, busy=True, replicas=3), RULES)
    assert not may_take("batch", _slots(10, batch=6, busy=True, replicas=3), RULES)
