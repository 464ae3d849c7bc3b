from __future__ import annotations

from cortex.routing.ejection import EjectionOptions, OutlierEjection
from harness.clock import ManualClock as Clock


def _ejection(clock: Clock, failures: int = 3) -> OutlierEjection:
    return OutlierEjection(
        EjectionOptions(consecutive_failures=failures, base_s=30, max_s=90), clock
    )


def _ejected(clock: Clock) -> OutlierEjection:
    """An ejection whose neuron "a" failed three times in a row: out for 30 s."""
    ejection = _ejection(clock)
    for _ in range(3):
        ejection.failure("a", can_eject=True)
    return ejection


def test_n_failures_in_a_row_eject_for_the_base_time() -> None:
    clock = Clock()
    ejection = _ejection(clock)
    assert ejection.failure("a", can_eject=True) is None
    assert ejection.failure("a", can_eject=True) is None
    assert ejection.failure("a", can_eject=True) == 30
    assert ejection.ejected("a")
    clock.now += 29.9
    assert ejection.ejected("a")
    clock.now += 0.2
    assert not ejection.ejected("a")
    assert ejection.on_probation("a")


def test_a_success_between_failures_starts_the_count_again() -> None:
    ejection = _ejection(Clock())
    ejection.failure("a", can_eject=True)
    ejection.failure("a", can_eject=True)
    ejection.success("a")
    assert ejection.failure("a", can_eject=True) is None
    assert not ejection.ejected("a")


def test_on_probation_one_failure_ejects_again_for_longer_up_to_the_maximum() -> None:
    clock = Clock()
    ejection = _ejection(clock)
    durations = []
    for _ in range(4):
        while (seconds := ejection.failure("a", can_eject=True)) is None:
            pass
        durations.append(seconds)
        clock.now += seconds
        assert not ejection.ejected("a")  # back, on probation
    assert durations == [30, 60, 90, 90]


def test_on_probation_one_success_clears_it() -> None:
    clock = Clock()
    ejection = _ejected(clock)
    clock.now += 30
    assert not ejection.ejected("a")
    ejection.success("a")
    assert not ejection.on_probation("a")
    assert ejection.failure("a", can_eject=True) is None  # counting from zero again


def test_the_count_of_ejections_is_forgotten_after_a_long_good_stretch() -> None:
    clock = Clock()
    ejection = _ejected(clock)
    clock.now += 30
    ejection.ejected("a")
    ejection.success("a")
    clock.now += 90  # max_s in without an ejection
    for _ in range(2):
        ejection.failure("a", can_eject=True)
    assert ejection.failure("a", can_eject=True) == 30  # not 60


def test_a_neuron_that_may_not_be_ejected_is_ejected_once_it_may() -> None:
    ejection = _ejection(Clock())
    for _ in range(5):
        assert ejection.failure("a", can_eject=False) is None
    assert not ejection.ejected("a")
    assert ejection.failure("a", can_eject=True) == 30


def test_failures_of_requests_started_before_the_ejection_do_not_lengthen_it() -> None:
    clock = Clock()
    ejection = _ejected(clock)
    assert ejection.failure("a", can_eject=True) is None
    clock.now += 30
    assert not ejection.ejected("a")


def test_neurons_are_counted_apart_and_forgotten() -> None:
    ejection = _ejection(Clock(), failures=1)
    ejection.failure("a", can_eject=True)
    assert ejection.ejected("a") and not ejection.ejected("b")
    ejection.forget("a")
    assert not ejection.ejected("a")
