"""`neuraxis up`'s supervision, with fake children on a manual clock: cortex
started again when it dies (the restart policy), the stack ended when an
essential child exits or cortex keeps dying, and the start-up wait."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from neuraxis.supervisor import RestartPolicy, Supervisor


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeChild:
    """A child that exits with `code` at `exits_at` (never, when None)."""

    clock: Clock
    exits_at: float | None = None
    code: int = 0

    def poll(self) -> int | None:
        if self.exits_at is None or self.clock.now < self.exits_at:
            return None
        return self.code


@dataclass
class Cortexes:
    """Starts cortexes that each live for the next of `lives` (seconds, exit
    code; None: for ever), and answer ready `ready_after` s after they start."""

    clock: Clock
    lives: list[tuple[float, int] | None]
    ready_after: float = 1.0
    started: list[FakeChild] = field(default_factory=list)
    reaped: list[FakeChild] = field(default_factory=list)
    _started_at: float = 0.0

    def start(self) -> FakeChild:
        life = self.lives.pop(0) if self.lives else None
        exits_at, code = (None, 0) if life is None else (self.clock.now + life[0], life[1])
        child = FakeChild(self.clock, exits_at, code)
        self.started.append(child)
        self._started_at = self.clock.now
        return child

    def ready(self) -> bool:
        current = self.started[-1]
        alive = current.poll() is None
        return alive and self.clock.now - self._started_at >= self.ready_after

    def reap(self, child: FakeChild) -> None:
        self.reaped.append(child)


def _supervisor(cortexes: Cortexes, policy: RestartPolicy | None = None) -> Supervisor[FakeChild]:
    clock = cortexes.clock
    return Supervisor(
        cortexes.start, cortexes.ready, cortexes.reap, policy, clock=clock, sleep=clock.sleep
    )


# The restart policy


def test_a_cortex_that_served_is_started_again_whatever_ended_it() -> None:
    policy = RestartPolicy()
    policy.served()
    for now, code in ((0.0, -9), (100.0, 1), (200.0, 0)):
        verdict = policy.decide(code, now)
        assert verdict.restart, verdict.reason
        assert f"cortex exited (code {code}); starting it again" in verdict.reason


def test_a_configuration_error_is_never_retried() -> None:
    policy = RestartPolicy()
    policy.served()
    verdict = policy.decide(2, 0.0)
    assert not verdict.restart
    assert verdict.reason == "cortex exited with code 2, a configuration error"


def test_while_starting_only_a_death_by_a_signal_is_retried() -> None:
    policy = RestartPolicy()
    assert policy.decide(-6, 0.0).restart
    verdict = policy.decide(1, 1.0)
    assert not verdict.restart
    assert verdict.reason == "cortex exited during start-up (code 1)"


def test_a_cortex_that_keeps_dying_is_given_up_on_then_the_window_slides() -> None:
    policy = RestartPolicy(burst=3, interval_s=60.0)
    policy.served()
    assert [policy.decide(-9, t).restart for t in (0.0, 10.0, 20.0)] == [True] * 3
    verdict = policy.decide(-9, 59.0)
    assert not verdict.restart
    assert verdict.reason == "cortex exited 4 times within 60 s (code -9 the last time)"
    # The first restart is a minute old: one more is allowed.
    assert policy.decide(-9, 60.0).restart


# The supervisor


def test_a_killed_cortex_is_started_again_and_the_others_keep_running(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = Clock()
    cortexes = Cortexes(clock, [(10.0, -9), None])
    supervisor = _supervisor(cortexes)
    head = FakeChild(clock, exits_at=100.0, code=1)
    supervisor.add("the Ray head", head)
    supervisor.start_cortex()
    supervisor.wait_ready(900.0)

    assert supervisor.serve() == 1  # when the head exits, at 100 s

    first, second = cortexes.started
    assert cortexes.reaped == [first]
    assert supervisor.children() == [head, second]
    out, err = capsys.readouterr()
    assert "neuraxis: warning: cortex exited (code -9); starting it again on the same ports" in err
    assert "neuraxis: cortex ready again in 1.0 s" in out
    assert err.endswith("neuraxis: the Ray head exited (code 1); stopping\n")


def test_a_cortex_that_keeps_dying_ends_the_stack(capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    cortexes = Cortexes(clock, [(5.0, -9), (2.0, -9), (2.0, -11), (2.0, -9)])
    supervisor = _supervisor(cortexes)
    supervisor.add("the Ray head", FakeChild(clock))
    supervisor.start_cortex()
    supervisor.wait_ready(900.0)

    assert supervisor.serve() == 1

    assert len(cortexes.started) == 4 and cortexes.reaped == cortexes.started[:3]
    err = capsys.readouterr().err
    assert err.count("starting it again") == 3
    assert err.endswith(
        "neuraxis: cortex exited 4 times within 60 s (code -9 the last time); stopping\n"
    )


def test_a_cortex_killed_while_starting_is_started_again() -> None:
    clock = Clock()
    cortexes = Cortexes(clock, [(0.5, -6), None], ready_after=2.0)
    supervisor = _supervisor(cortexes)
    ticks: list[float] = []
    supervisor.start_cortex()
    supervisor.wait_ready(900.0, lambda: ticks.append(clock.now))
    assert len(cortexes.started) == 2 and clock.now >= 2.5
    assert ticks[0] == 0.0 and len(ticks) > 3  # the replica watch runs between looks


@pytest.mark.parametrize(
    ("cortex_life", "ready_after", "head_exits_at", "said"),
    [
        # cortex with bad settings
        ((0.5, 1), 1.0, None, r"^neuraxis: cortex exited during start-up \(code 1\)$"),
        # an essential child that exits while starting
        (None, 60.0, 3.0, r"the Ray head exited during start-up \(code 1\)"),
        # not ready in time
        (None, 1000.0, None, r"^neuraxis: not ready after 900 s$"),
    ],
    ids=["cortex-exits", "essential-child-exits", "not-ready-in-time"],
)
def test_the_start_ends(
    cortex_life: tuple[float, int] | None,
    ready_after: float,
    head_exits_at: float | None,
    said: str,
) -> None:
    clock = Clock()
    supervisor = _supervisor(Cortexes(clock, [cortex_life], ready_after=ready_after))
    if head_exits_at is not None:
        supervisor.add("the Ray head", FakeChild(clock, exits_at=head_exits_at, code=1))
    supervisor.start_cortex()
    with pytest.raises(SystemExit, match=said):
        supervisor.wait_ready(900.0)
