from __future__ import annotations

from contextlib import ExitStack

from cortex.routing.retry_budget import RetryBudget, RetryBudgetOptions


def test_the_minimum_is_allowed_however_few_requests_are_in_flight() -> None:
    budget = RetryBudget(RetryBudgetOptions(ratio=0.2, minimum=3))
    with ExitStack() as stack:
        tickets = [stack.enter_context(budget.ticket()) for _ in range(4)]
        assert [t.refusal(engine_died=False) for t in tickets] == [
            None,
            None,
            None,
            "the retry budget is spent",
        ]
        assert budget.retrying == 3


def test_at_most_the_ratio_of_in_flight_requests_retry() -> None:
    budget = RetryBudget(RetryBudgetOptions(ratio=0.2, minimum=3))
    with ExitStack() as stack:
        tickets = [stack.enter_context(budget.ticket()) for _ in range(50)]
        allowed = [t for t in tickets if t.refusal(engine_died=False) is None]
        assert len(allowed) == 10


def test_a_slot_is_held_until_the_request_ends_and_its_next_retries_are_free() -> None:
    budget = RetryBudget(RetryBudgetOptions(ratio=0.0, minimum=1))
    with budget.ticket() as first:
        assert first.refusal(engine_died=False) is None
        assert first.refusal(engine_died=False) is None  # the same request again
        with budget.ticket() as second:
            assert second.refusal(engine_died=False) == "the retry budget is spent"
    assert (budget.in_flight, budget.retrying) == (0, 0)
    with budget.ticket() as third:
        assert third.refusal(engine_died=False) is None


def test_a_request_during_which_an_engine_died_is_retried_at_most_once() -> None:
    budget = RetryBudget()
    with budget.ticket() as ticket:
        assert ticket.refusal(engine_died=True) is None
        assert ticket.refusal(engine_died=True) is not None
    with budget.ticket() as ticket:
        assert ticket.refusal(engine_died=False) is None
        refusal = ticket.refusal(engine_died=True)
        assert refusal is not None and "engine died" in refusal


def test_moving_off_a_neuron_that_is_down_spends_no_budget() -> None:
    # A neuron gone (unreachable, or failing its health checks) takes a third
    # of the requests in flight with it: each must move, and moving it adds
    # no load its share would not have brought anyway.
    budget = RetryBudget(RetryBudgetOptions(ratio=0.2, minimum=3))
    with ExitStack() as stack:
        tickets = [stack.enter_context(budget.ticket()) for _ in range(30)]
        moved = [t.refusal(engine_died=False, neuron_down=True) for t in tickets[:10]]
        assert moved == [None] * 10
        assert budget.retrying == 0
        # Retries of other failures still meet the budget (6 of 30).
        others = [t.refusal(engine_died=False) for t in tickets[10:]]
        assert others.count(None) == 6


def test_an_engine_death_still_allows_one_retry_when_the_neuron_is_down() -> None:
    budget = RetryBudget()
    with budget.ticket() as ticket:
        assert ticket.refusal(engine_died=True, neuron_down=True) is None
        assert ticket.refusal(engine_died=False, neuron_down=True) is not None
