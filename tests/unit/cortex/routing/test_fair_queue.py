"""The fair queue's order on its own: weighted shares of tokens, a light
tenant ahead of backlogs, FIFO within a tenant, classes first, the charge
corrected, the request refused to make room; and FIFO order."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from cortex.routing.fair_queue import FairQueue, FifoQueue


@dataclass(eq=False)
class Item:
    tenant: str
    cost: float = 100.0
    weight: float = 1.0
    rank: int = 1
    n: int = 0


def _fill(queue: FairQueue[Item], tenant: str, count: int, **kw: float) -> list[Item]:
    items = [Item(tenant, n=i, **kw) for i in range(count)]  # type: ignore[arg-type]
    for item in items:
        queue.push(item)
    return items


def _tokens(order: list[Item]) -> Counter[str]:
    tokens: Counter[str] = Counter()
    for item in order:
        tokens[item.tenant] += int(item.cost)
    return tokens


def test_backlogged_tenants_get_tokens_in_proportion_to_their_weights() -> None:
    queue: FairQueue[Item] = FairQueue()
    _fill(queue, "a", 400, weight=1)
    _fill(queue, "b", 400, weight=3)
    _fill(queue, "c", 400, weight=6)
    served = _tokens([queue.pop() for _ in range(200)])
    assert served["b"] / served["a"] == 3 and served["c"] / served["a"] == 6


def test_shares_count_tokens_not_requests() -> None:
    queue: FairQueue[Item] = FairQueue()
    _fill(queue, "big", 100, cost=400.0)
    _fill(queue, "small", 400, cost=100.0)
    order = [queue.pop() for _ in range(100)]
    served = _tokens(order)
    assert abs(served["big"] - served["small"]) <= 400
    assert Counter(i.tenant for i in order)["small"] == 4 * Counter(i.tenant for i in order)["big"]


def test_a_light_tenant_waits_for_one_request_per_backlogged_tenant() -> None:
    queue: FairQueue[Item] = FairQueue()
    _fill(queue, "noisy", 500)
    _fill(queue, "other", 500)
    for _ in range(300):
        queue.pop()
    quiet = Item("quiet")
    queue.push(quiet)
    assert [queue.pop() is quiet for _ in range(3)].index(True) <= 2


def test_a_tenant_back_from_idle_takes_the_next_slot_before_a_backlog() -> None:
    queue: FairQueue[Item] = FairQueue()
    _fill(queue, "noisy", 10)
    for _ in range(4):
        queue.pop()  # four of noisy's run, six wait
    quiet = Item("quiet")
    queue.push(quiet)
    # Level with noisy at V, it has nothing running: it goes first.
    assert queue.peek() is quiet and queue.pop() is quiet
    assert queue.pop().tenant == "noisy"


def test_peek_is_what_pop_returns_and_ahead_of_counts_classes() -> None:
    queue: FairQueue[Item] = FairQueue()
    assert not queue.ahead_of(0)
    _fill(queue, "a", 2, rank=2)
    _fill(queue, "b", 1, rank=1)
    assert queue.ahead_of(1) and queue.ahead_of(2) and not queue.ahead_of(0)
    for _ in range(3):
        expected = queue.peek()
        assert queue.pop() is expected


def test_a_tenants_requests_keep_their_order() -> None:
    queue: FairQueue[Item] = FairQueue()
    a = _fill(queue, "a", 5)
    b = _fill(queue, "b", 5)
    order = [queue.pop() for _ in range(10)]
    assert [i for i in order if i.tenant == "a"] == a
    assert [i for i in order if i.tenant == "b"] == b


def test_a_higher_class_goes_first_whatever_its_tenant_used() -> None:
    queue: FairQueue[Item] = FairQueue()
    _fill(queue, "heavy", 3, rank=0)
    for _ in range(3):
        queue.pop()  # heavy has used a lot
    batch = _fill(queue, "light", 2, rank=2)
    interactive = _fill(queue, "heavy", 2, rank=0)
    assert [queue.pop() for _ in range(4)] == interactive + batch


def test_corrections_share_the_tokens_really_used() -> None:
    queue: FairQueue[Item] = FairQueue()
    _fill(queue, "short", 200)  # charged 100 each, each uses 10
    _fill(queue, "long", 200)  # charged 100 each, each uses 100
    served: Counter[str] = Counter()
    for _ in range(110):
        item = queue.pop()
        served[item.tenant] += 1
        if item.tenant == "short":
            queue.correct("short", 1.0, 10.0 - item.cost)
    assert served["short"] == 10 * served["long"]


def test_a_newcomer_starts_level_with_a_tenant_whose_charge_was_corrected_down() -> None:
    # The start of tests/integration/test_fairness.py: light runs two
    # requests charged 9 tokens each; one ends having used 6.
    queue: FairQueue[Item] = FairQueue()
    queue.charge(Item("light", cost=9.0))
    queue.charge(Item("light", cost=9.0))
    queue.correct("light", 1.0, -3.0)
    queue.ended("light")
    _fill(queue, "light", 2, cost=9.0)
    _fill(queue, "heavy", 6, cost=9.0, weight=3)
    # V followed light's corrected F (15), where heavy starts (and goes
    # first: nothing of it runs): three heavy requests for light's one. A V
    # left at the charge (18) started heavy a request behind, and light
    # went again after two.
    assert [queue.pop().tenant[0] for _ in range(5)] == ["h", "l", "h", "h", "l"]


def test_an_idle_tenant_is_not_owed_its_idle_time() -> None:
    queue: FairQueue[Item] = FairQueue()
    _fill(queue, "busy", 100)
    for _ in range(50):
        queue.pop()
    late = _fill(queue, "late", 10)
    order = [queue.pop() for _ in range(10)]
    # It starts at the queue's virtual time: shares from now on, not a burst.
    assert sum(1 for i in order if i in late) == 5


def test_what_a_tenant_used_while_nobody_waited_still_counts() -> None:
    queue: FairQueue[Item] = FairQueue()
    for _ in range(50):
        queue.charge(Item("steady"))  # admitted at once, the model idle
    _fill(queue, "steady", 5)
    burst = _fill(queue, "newcomer", 5)
    # It starts level with steady (whose requests still run): they alternate,
    # the newcomer first, instead of it going 50 requests ahead.
    assert [queue.pop() in burst for _ in range(4)] == [True, False, True, False]


def test_a_tenant_whose_requests_all_run_keeps_its_place() -> None:
    queue: FairQueue[Item] = FairQueue()
    [first] = _fill(queue, "heavy", 1, weight=3)
    _fill(queue, "light", 2)
    assert queue.pop() is first  # heavy now runs, nothing of it waits
    assert queue.pop().tenant == "light"
    [again] = _fill(queue, "heavy", 1, weight=3)
    # Not moved up to the waiting light's time: it used a third as much.
    assert queue.pop() is again
    queue.ended("heavy")
    queue.ended("heavy")
    queue.ended("light")
    assert queue.waiting("light") == 1


def test_newest_below_picks_the_last_arrival_of_the_lowest_class() -> None:
    queue: FairQueue[Item] = FairQueue()
    _fill(queue, "a", 2, rank=1)
    batch = _fill(queue, "b", 2, rank=2) + _fill(queue, "c", 1, rank=2)
    assert queue.newest_below(0) is batch[-1]
    assert queue.newest_below(2) is None
    assert queue.remove(batch[-1]) and not queue.remove(batch[-1])
    assert queue.newest_below(1) is batch[1]
    assert len(queue) == 4 and queue.waiting("b") == 2 and queue.waiting("c") == 0


def test_removed_requests_are_not_charged() -> None:
    queue: FairQueue[Item] = FairQueue()
    a = _fill(queue, "a", 3)
    _fill(queue, "b", 3)
    queue.remove(a[0])
    queue.remove(a[1])
    assert [queue.pop().tenant for _ in range(2)] == ["a", "b"]


def test_fifo_order_ignores_tenants_and_classes() -> None:
    queue: FifoQueue[Item] = FifoQueue()
    items = [Item("a", rank=2), Item("b", rank=0), Item("a", weight=9)]
    for item in items:
        queue.push(item)
    assert queue.waiting("a") == 2 and queue.newest_below(0) is None
    assert [queue.pop() for _ in range(3)] == items
    assert len(queue) == 0 and queue.waiting("a") == 0


def test_a_tenant_back_from_idle_would_go_first_and_a_backlogged_one_would_not() -> None:
    queue: FairQueue[Item] = FairQueue()
    assert not queue.first_on_return("quiet", 1)  # nobody waits: nothing to hold for
    queue.charge(Item("quiet"))
    _fill(queue, "noisy", 10)
    for _ in range(4):
        queue.pop()  # four of noisy's start while quiet's runs
    queue.ended("quiet")
    assert queue.first_on_return("quiet", 1)
    # A lower class than the waiters' would not go first, a higher one would.
    assert not queue.first_on_return("quiet", 2) and queue.first_on_return("quiet", 0)
    # Far ahead of noisy in virtual time (it used much more): not owed.
    queue.correct("quiet", 1.0, 10_000)
    assert not queue.first_on_return("quiet", 1)
    assert not FifoQueue[Item]().first_on_return("quiet", 0)
