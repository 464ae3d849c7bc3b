"""The failover log: losses wait for their replacement, in order, and a
failed start gives its loss back to the next one."""

from __future__ import annotations

from cortex.cluster.failovers import FAILOVERS_KEPT, FailoverLog


def test_each_loss_is_replaced_once_oldest_first_and_a_failed_start_gives_it_back() -> None:
    log = FailoverLog()
    log.lost("chat", "chat-1", "its actor is gone", "10.0.0.1:1", 100.0)
    log.lost("chat", "chat-2", "its neuron exited", None, 101.0)
    first = log.claim("chat")
    assert first is not None and first.replica == "chat-1"
    log.unclaim(first)  # its replacement failed to start
    again = log.claim("chat")
    assert again == first
    second = log.claim("chat")
    assert second is not None and second.replica == "chat-2"
    assert log.claim("chat") is None and log.claim("embed") is None
    log.replaced(again, "chat-3", "10.0.0.2:1", 102.5)
    [failover] = log.recent()
    assert (failover.replica, failover.replacement, failover.seconds_to_ready) == (
        "chat-1",
        "chat-3",
        2.5,
    )


def test_only_the_last_failovers_are_kept() -> None:
    log = FailoverLog()
    for i in range(FAILOVERS_KEPT + 5):
        log.lost("chat", f"chat-{i}", "gone", None, float(i))
        lost = log.claim("chat")
        assert lost is not None
        log.replaced(lost, f"new-{i}", None, float(i) + 1.0)
    kept = log.recent()
    assert len(kept) == FAILOVERS_KEPT
    assert kept[-1].replacement == f"new-{FAILOVERS_KEPT + 4}"
