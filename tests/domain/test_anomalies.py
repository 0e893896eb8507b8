"""B1: impossible events are visible. `step` stays total, so an event a correct shell never
feeds is recorded in the state's `anomalies` (and the result's) and changes nothing else; an
event that may legitimately arrive late is ignored without a record. One test per row of the
table in `cordstream.domain.machine._Run.handle`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cordstream.domain import (
    StopRequest,
    StreamConfig,
    StreamState,
    TextChunk,
    events,
    initial_state,
    step,
)
from tests.support.answers import answers, chunkings
from tests.support.driver import Driver
from tests.support.fuzz import examples
from tests.support.live_driver import LiveDriver, live

FAILURE = events.DiscordFailure(500, 500, RuntimeError("HTTP 500"))


def ready() -> Driver:
    return Driver(auto_deliver=False)


def streaming() -> Driver:
    driver = Driver(StreamConfig(delivery="messages", humanizer_degree=1), auto_deliver=False)
    driver.start()
    driver.text("Hello\n", "wor")  # message 1 in flight, "wor" in the tail
    return driver


def ending() -> Driver:
    driver = streaming()
    driver.feed(events.ProviderEnded(driver.now))  # message 1 still in flight
    assert driver.state.phase == "ending"
    return driver


def unchanged_but_recorded(before: StreamState, after: StreamState) -> bool:
    core = replace(after.core, anomalies=before.core.anomalies)
    return (after.deadline, after.tail, core) == (before.deadline, before.tail, before.core)


Case = tuple[str, Callable[[Driver], object]]  # a phase, and the event to feed in it

IMPOSSIBLE: list[Case] = [
    ("ready", lambda d: events.ChunkArrived(d.now, TextChunk("x"))),
    ("ready", lambda d: events.ProviderEnded(d.now)),
    ("ready", lambda d: events.ProviderCrashed(d.now, RuntimeError("x"))),
    ("ready", lambda d: events.StopRequested(d.now, StopRequest("stop", "user-1"))),
    ("ready", lambda d: events.TimerFired(d.now, 30.0)),
    ("ready", lambda d: events.PauseOver(d.now, 1)),
    ("ready", lambda d: events.Delivered(d.now, 1)),
    ("ready", lambda d: events.Rejected(d.now, 1, FAILURE)),
    ("streaming", lambda d: events.Started(d.now)),
    ("streaming", lambda d: events.Delivered(d.now, 7)),
    ("streaming", lambda d: events.Rejected(d.now, 7, FAILURE)),
    ("streaming", lambda d: events.PauseOver(d.now, 7)),
    ("ending", lambda d: events.Started(d.now)),
    ("ending", lambda d: events.ChunkArrived(d.now, TextChunk("more"))),
    ("ending", lambda d: events.Delivered(d.now, 2)),
    ("ending", lambda d: object()),  # not an event at all
]
LEGITIMATE: list[Case] = [
    ("streaming", lambda d: events.TimerFired(d.now, -1.0)),  # an earlier arming
    ("ending", lambda d: events.ProviderEnded(d.now)),  # the provider ended as the stream did
    ("ending", lambda d: events.ProviderCrashed(d.now, RuntimeError("x"))),  # or the last resort
    ("ending", lambda d: events.TimerFired(d.now, d.armed or 0.0)),  # the timer outlived streaming
    ("ending", lambda d: events.TimerFired(d.now, -1.0)),
]
SETUPS = {"ready": ready, "streaming": streaming, "ending": ending}


def _id(case: Case) -> str:
    phase, make = case
    return f"{type(make(Driver())).__name__}-in-{phase}"


@pytest.mark.parametrize("case", IMPOSSIBLE, ids=_id)
def test_B1_an_impossible_event_is_recorded_and_changes_nothing_else(
    case: Case,
) -> None:
    phase, make = case
    driver = SETUPS[phase]()
    before = driver.state
    event = make(driver)
    after, effects = step(before, event)  # type: ignore[arg-type]  # not always an Event
    assert effects == ()
    assert unchanged_but_recorded(before, after)
    assert len(after.core.anomalies) == len(before.core.anomalies) + 1
    assert type(event).__name__ in after.core.anomalies[-1]
    assert phase in after.core.anomalies[-1]


@pytest.mark.parametrize("case", LEGITIMATE, ids=_id)
def test_B1_a_late_event_is_a_no_op_without_a_record(case: Case) -> None:
    phase, make = case
    driver = SETUPS[phase]()
    before = driver.state
    event = make(driver)
    assert isinstance(event, events.TimerFired | events.ProviderEnded | events.ProviderCrashed)
    after, effects = step(before, event)
    assert (after, effects) == (before, ())


def test_B1_a_pause_a_stop_ended_early_may_still_report() -> None:
    driver = Driver(StreamConfig(delivery="messages", humanizer_degree=2), auto_deliver=False)
    driver.start()
    driver.text("One line here.\n", "Two, a longer line.\n", "Three more words.\n", "Four")
    driver.deliver()  # the first message; the next waits for a typing pause (E9)
    pause = driver.pause
    assert pause is not None
    driver.pause = None  # its timer still runs, as in the shell
    driver.request(StopRequest("stop", "user-1"))  # the stop sends the rest at once
    assert driver.pending_send is not None
    assert driver.state.phase == "ending"
    before = driver.state
    assert step(before, events.PauseOver(driver.now, pause.token)) == (before, ())
    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert step(driver.state, events.PauseOver(driver.now, pause.token)) == (driver.state, ())


def test_B1_a_turn_granted_again_after_it_was_used_is_a_no_op_without_a_record() -> None:
    """Live delivery: the stream stopped waiting for a turn once it came; the same turn
    granted again (the shell's wait answered twice) changes nothing and is no anomaly."""
    driver = LiveDriver(live(), auto=False)
    driver.start()
    driver.text("Hello")
    turn = driver.turn
    assert turn is not None
    driver.grant()  # the message goes out; the stream waits for its answer, not a turn
    assert driver.turn is None
    assert driver.in_flight is not None
    before = driver.state
    assert step(before, events.TurnGranted(driver.now, turn.token)) == (before, ())
    driver.deliver()
    assert driver.end().anomalies == ()


def test_B1_the_result_lists_the_anomalies() -> None:
    driver = ending()
    driver.anomalies_fed = 2
    driver.feed(events.Delivered(driver.now, 5))
    driver.chunk(TextChunk("late"))
    result = driver.settle()
    assert result.status == "completed"
    assert result.messages == ("Hello", "wor")  # the bogus events changed nothing
    assert len(result.anomalies) == 2
    assert result.anomalies[0].startswith("Delivered for request 5 (in flight: 1)")
    assert result.anomalies[1] == "ChunkArrived in phase ending"


def test_B1_after_the_result_nothing_is_recorded() -> None:
    driver = ending()
    result = driver.settle()
    state = driver.state
    for event in (events.Delivered(driver.now, 9), events.ChunkArrived(driver.now, TextChunk("x"))):
        assert step(state, event) == (state, ())
    assert result.anomalies == ()


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    degree=st.integers(0, 3),
    max_len=st.sampled_from((200, 1950)),
    auto=st.booleans(),
)
def test_B1_a_correct_driver_causes_no_anomaly(
    data: st.DataObject, degree: int, max_len: int, auto: bool
) -> None:
    """Answer every request, end every pause and fire every timer as a correct shell does,
    in any interleaving: no result lists an anomaly (the `Driver` asserts it on `Finish`)."""
    answer = data.draw(answers())
    config = StreamConfig(delivery="messages", humanizer_degree=degree, max_message_length=max_len)
    driver = Driver(config, auto_deliver=auto)
    driver.start()
    for chunk in data.draw(chunkings(answer.markup)):
        if not driver.state.wants_chunks:
            break
        driver.text(chunk)
        if driver.pending_send is not None and data.draw(st.booleans()):
            driver.deliver()
        elif driver.pause is not None and data.draw(st.booleans()):
            driver.end_pause()
        elif data.draw(st.integers(0, 9)) == 0:
            driver.request(StopRequest(data.draw(st.sampled_from(("stop", "follow_up"))), "u"))
    if driver.state.wants_chunks:
        driver.feed(events.ProviderEnded(driver.now))
    result = driver.settle()
    assert result.anomalies == ()
    assert driver.state.core.anomalies == ()


def test_B1_the_initial_state_has_no_anomaly() -> None:
    assert initial_state(StreamConfig(delivery="messages")).core.anomalies == ()


def test_B1_an_unknown_pause_end_is_recorded_with_its_token_and_the_pause_under_way() -> None:
    driver = streaming()
    after, effects = step(driver.state, events.PauseOver(driver.now, 7))
    assert effects == ()
    assert after.core.anomalies[-1] == "PauseOver for pause 7 (current: None) in phase streaming"
