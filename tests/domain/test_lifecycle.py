"""The provider's lifecycle (`cordstream.domain.lifecycle`), pure: when the provider's task is
cancelled, cancelled again and given up (B10, B11), with `now` as input. No event loop."""

from __future__ import annotations

import math

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cordstream.domain.lifecycle import ArmExpiry, Budgets, Cancel, Lifecycle, TakeBack
from tests.support.fuzz import examples

BUDGETS = Budgets(close_timeout=5.0, close_grace=0.1)


def running() -> Lifecycle:
    return Lifecycle(BUDGETS).started()


def test_B10_a_stop_while_reading_cancels_the_read_and_starts_the_budget() -> None:
    state, actions = running().stop(10.0, reading=True)
    assert actions == (ArmExpiry(15.0), Cancel())
    assert state.stage == "closing"
    assert state.close_by == 15.0
    assert state.cancels == 1


def test_B10_a_stop_between_reads_does_not_interrupt_the_providers_own_code() -> None:
    state, actions = running().stop(10.0, reading=False)
    assert actions == (ArmExpiry(15.0),)
    assert state.cancels == 0


def test_B10_only_the_first_stop_starts_the_budget_and_cancels() -> None:
    state, _ = running().stop(10.0, reading=True)
    again, actions = state.stop(12.0, reading=True)
    assert actions == ()
    assert again.close_by == 15.0
    assert again.cancels == 1


def test_B4_a_stop_before_the_task_exists_arms_nothing() -> None:
    state, actions = Lifecycle(BUDGETS).stop(1.0, reading=False)
    assert actions == ()
    assert state.close_by == 6.0
    assert state.task == "none"


def test_B10_the_task_created_after_a_stop_is_armed_at_the_next_stop() -> None:
    state, _ = Lifecycle(BUDGETS).stop(1.0, reading=False)
    state, actions = state.started().stop(2.0, reading=False)
    assert actions == (ArmExpiry(6.0),)


def test_B10_the_cancellations_are_taken_back_when_the_read_ends() -> None:
    state, _ = running().stop(10.0, reading=True)
    state, actions = state.read_ends()
    assert actions == (TakeBack(1),)
    assert state.cancels == 0
    assert state.read_ends() == (state, ())


def test_B10_the_budget_spent_cancels_again_wherever_the_task_is() -> None:
    state, _ = running().stop(10.0, reading=False)
    state, actions = state.expire()
    assert actions == (Cancel(),)
    assert state.stage == "expired"
    assert state.wait_until == 15.1


def test_B10_no_timer_is_armed_once_the_budget_is_spent() -> None:
    state, _ = running().stop(10.0, reading=False)
    state, _ = state.expire()
    assert state.stop(11.0, reading=False) == (state, ())
    _, actions = state.hurry(11.0)
    assert actions == (Cancel(),)


def test_B11_the_callers_cancellation_shrinks_the_budget_to_the_grace_and_cancels() -> None:
    state, _ = running().stop(10.0, reading=False)
    state, actions = state.hurry(11.0)
    assert actions == (ArmExpiry(11.1), Cancel())
    assert state.close_by == 11.1
    assert state.wait_until == 11.2


def test_B11_a_hurry_never_lengthens_the_budget() -> None:
    state, _ = running().hurry(10.0)
    assert state.close_by == 10.1
    later, actions = state.hurry(20.0)
    assert later.close_by == 10.1
    assert actions == (Cancel(),)


def test_B11_a_hurry_while_wanted_starts_the_budget_at_the_grace() -> None:
    state, actions = running().hurry(3.0)
    assert actions == (ArmExpiry(3.1), Cancel())
    assert state.stage == "closing"


def test_B11_an_ended_task_is_never_cancelled() -> None:
    state = running().ended()
    assert state.stop(1.0, reading=True)[1] == ()
    assert state.hurry(1.0)[1] == ()
    assert state.expire()[1] == ()
    assert state.give_up().task == "ended"


def test_B11_a_task_still_running_when_the_wait_ends_is_abandoned() -> None:
    assert running().give_up().task == "abandoned"
    assert not running().give_up().alive


def test_B10_while_wanted_the_shell_waits_for_no_deadline() -> None:
    assert math.isinf(running().wait_until)


class LifecycleMachine(RuleBasedStateMachine):
    """Any order of what the shell reports: the budget only shrinks, the timer is armed for
    the budget's end, a cancellation is sent only to a running task, and every one sent is
    taken back by the next read's end."""

    def __init__(self) -> None:
        super().__init__()
        self.state = Lifecycle(BUDGETS)
        self.now = 0.0
        self.first_stop: float | None = None
        self.timer: float | None = None
        self.cancelled = 0  # sent and not taken back

    def apply(self, decided: tuple[Lifecycle, tuple[object, ...]], *, alive: bool) -> None:
        before = self.state
        self.state, actions = decided
        for action in actions:
            match action:
                case Cancel():
                    assert alive, "a cancellation sent to a task that is not running"
                    self.cancelled += 1
                case ArmExpiry(at=at):
                    assert self.state.stage == "closing"
                    assert at == self.state.close_by
                    self.timer = at
                case TakeBack(count=count):
                    assert count == self.cancelled
                    self.cancelled = 0
        assert self.state.close_by <= before.close_by  # the budget never grows

    @rule(seconds=st.floats(0.0, 10.0))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @precondition(lambda self: self.state.task == "none")
    @rule()
    def started(self) -> None:
        self.state = self.state.started()

    @rule(reading=st.booleans())
    def stop(self, reading: bool) -> None:
        alive = self.state.alive
        if self.first_stop is None and self.state.stage == "wanted":
            self.first_stop = self.now
        self.apply(self.state.stop(self.now, reading=reading and alive), alive=alive)

    @rule()
    def hurry(self) -> None:
        if self.state.stage == "wanted":
            self.first_stop = self.now
        self.apply(self.state.hurry(self.now), alive=self.state.alive)
        if self.state.alive and self.state.stage == "closing":
            assert self.state.close_by <= self.now + BUDGETS.close_grace

    @precondition(lambda self: self.timer is not None)
    @rule()
    def timer_fires(self) -> None:
        self.now = max(self.now, self.timer or 0.0)
        self.timer = None
        self.apply(self.state.expire(), alive=self.state.alive)
        assert self.state.stage == "expired"

    @rule()
    def read_ends(self) -> None:
        if self.state.cancels:
            self.apply(self.state.read_ends(), alive=self.state.alive)
        assert self.state.cancels == 0

    @precondition(lambda self: self.state.alive)
    @rule()
    def ended(self) -> None:
        self.state = self.state.ended()
        self.timer = None

    @invariant()
    def cancels_are_counted(self) -> None:
        assert self.state.cancels == self.cancelled

    @invariant()
    def the_budget_counts_from_the_first_stop(self) -> None:
        if self.first_stop is None:
            assert self.state.stage == "wanted"
            assert math.isinf(self.state.wait_until)
        else:
            assert self.state.close_by <= self.first_stop + BUDGETS.close_timeout
            assert self.state.wait_until == self.state.close_by + BUDGETS.close_grace


TestLifecycle = LifecycleMachine.TestCase
TestLifecycle.settings = settings(max_examples=examples(200), stateful_step_count=30)
