"""The machine is total (h2 style): every phase × every event kind is handled, never raises.

The table test builds a state in each phase (and the sub-states that matter: inside a think
block, inside a code fence, a send in flight, a typing pause, an embed in flight) and applies
one event of every kind. The property test does the same from random event histories.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cordstream.domain import (
    ChunkArrived,
    Delivered,
    DiscordFailure,
    DoneChunk,
    ErrorChunk,
    Event,
    FunctionCall,
    FunctionCallChunk,
    PauseOver,
    ProviderCrashed,
    ProviderEnded,
    ProviderError,
    Rejected,
    Started,
    StopRequest,
    StopRequested,
    StreamConfig,
    StreamState,
    TextChunk,
    TimerFired,
    initial_state,
    step,
)
from cordstream.domain.delivery import Messages
from cordstream.domain.outbox import Outbox
from tests.support.fuzz import examples


def _fresh(degree: int = 1) -> StreamState:
    return initial_state(
        StreamConfig(delivery="messages", humanizer_degree=degree, max_message_length=200)
    )


def _started(*events: Event, degree: int = 1) -> StreamState:
    """A fresh state, started at 0, after `events`."""
    state, _ = step(_fresh(degree), Started(0.0))
    for event in events:
        state, _ = step(state, event)
    return state


def _out(state: StreamState) -> Outbox:
    """The outbox of a state under messages delivery (the table's deliveries)."""
    assert isinstance(state.delivery, Messages)
    return state.delivery.out


def _text(text: str) -> ChunkArrived:
    return ChunkArrived(0.1, TextChunk(text))


PHASES: dict[str, Callable[[], StreamState]] = {
    "ready": _fresh,
    "streaming": _started,
    "streaming in think": lambda: _started(_text("<th")),
    "streaming in code": lambda: _started(_text("```py\nx = 1\n")),
    "streaming, send in flight": lambda: _started(_text("one\ntwo")),
    "streaming, typing pause": lambda: _started(
        _text("one\ntwo\nthree\n"), Delivered(0.2, 1), degree=2
    ),
    "ending, embed in flight": lambda: _started(ProviderCrashed(0.1, RuntimeError("boom"))),
    "ending, messages queued": lambda: _started(
        _text("one\ntwo\nthree\nfour"), ProviderEnded(0.2), degree=2
    ),
    "finished": lambda: _started(StopRequested(0.1, StopRequest("follow_up", "u"))),
}

EVENTS: dict[str, Callable[[StreamState], Event]] = {
    "started": lambda s: Started(1.0),
    "started with a stop": lambda s: Started(1.0, StopRequest("stop", "u")),
    "text": lambda s: ChunkArrived(1.0, TextChunk("hello\nworld")),
    "text with tags": lambda s: ChunkArrived(1.0, TextChunk("</think><details>x</details>")),
    "usage only": lambda s: ChunkArrived(1.0, TextChunk("", usage={"prompt_tokens": 1})),
    "function call": lambda s: ChunkArrived(1.0, FunctionCallChunk(FunctionCall("f"))),
    "no function call": lambda s: ChunkArrived(1.0, FunctionCallChunk(None)),
    "error": lambda s: ChunkArrived(1.0, ErrorChunk(ProviderError("timeout", "slow")), "Slow"),
    "no error": lambda s: ChunkArrived(1.0, ErrorChunk(None)),
    "done": lambda s: ChunkArrived(1.0, DoneChunk({"finish_reason": "stop"})),
    "garbage": lambda s: ChunkArrived(1.0, object()),
    "provider ended": lambda s: ProviderEnded(1.0),
    "provider crashed": lambda s: ProviderCrashed(1.0, ValueError("bad")),
    "user stop": lambda s: StopRequested(1.0, StopRequest("stop", "u", "ctx")),
    "system stop": lambda s: StopRequested(1.0, StopRequest("stop", None)),
    "internal stop": lambda s: StopRequested(1.0, StopRequest.stop("flush_limit")),
    "follow-up": lambda s: StopRequested(1.0, StopRequest("follow_up", "u")),
    "timer due": lambda s: TimerFired(1e9, s.core.armed_at),
    "timer early": lambda s: TimerFired(0.5, s.core.armed_at),
    "timer stale": lambda s: TimerFired(1e9, -1.0),
    "pause over": lambda s: PauseOver(10.0, _out(s).pause or 0),
    "pause over, stale": lambda s: PauseOver(10.0, 999),
    "delivered": lambda s: Delivered(1.0, _out(s).in_flight or 0, "https://x"),
    "delivered, stale": lambda s: Delivered(1.0, 999),
    "rejected 10003": lambda s: Rejected(1.0, _out(s).in_flight or 0, DiscordFailure(10003)),
    "rejected 50013": lambda s: Rejected(1.0, _out(s).in_flight or 0, DiscordFailure(50013)),
    "rejected, stale": lambda s: Rejected(1.0, 999, DiscordFailure(None, 500)),
}


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("kind", EVENTS)
def test_B1_every_phase_handles_every_event(phase: str, kind: str) -> None:
    state = PHASES[phase]()
    new, effects = step(state, EVENTS[kind](state))
    assert isinstance(new, StreamState)
    assert isinstance(effects, tuple)
    if state.phase == "finished":
        assert (new, effects) == (state, ())  # nothing after the result


def test_B1_every_phase_is_reachable_in_the_table() -> None:
    assert {builder().phase for builder in PHASES.values()} == {
        "ready",
        "streaming",
        "ending",
        "finished",
    }


_seq = st.integers(0, 6)
_now = st.floats(0, 500, allow_nan=False)
_chunk = st.one_of(
    st.text(max_size=30).map(TextChunk),
    st.sampled_from(
        (
            TextChunk("<think>x"),
            TextChunk("</think>"),
            TextChunk("```\n"),
            TextChunk("(open\n"),
            DoneChunk(),
            FunctionCallChunk(FunctionCall("f")),
            ErrorChunk(ProviderError("api_error", "x")),
            None,
            3,
        )
    ),
)
_request = st.builds(
    StopRequest,
    st.sampled_from(("stop", "follow_up")),
    st.sampled_from((None, "u", "flush_limit", "missing_access")),
)
_events = st.one_of(
    st.builds(Started, _now, st.none() | _request),
    st.builds(ChunkArrived, _now, _chunk),
    st.builds(ProviderEnded, _now),
    st.builds(ProviderCrashed, _now, st.just(RuntimeError("x"))),
    st.builds(StopRequested, _now, _request),
    st.builds(TimerFired, _now, st.sampled_from((0.0, 120.0, math.inf))),
    st.builds(PauseOver, _now, _seq),
    st.builds(Delivered, _now, _seq),
    st.builds(Rejected, _now, _seq, st.builds(DiscordFailure, st.sampled_from((10003, 50013)))),
)


@settings(max_examples=examples(300), deadline=None)
@given(degree=st.integers(0, 3), history=st.lists(_events, max_size=25))
def test_B1_any_history_gives_a_state_and_at_most_one_result(
    degree: int, history: list[Event]
) -> None:
    state = _fresh(degree)
    results = 0
    for event in history:
        state, effects = step(state, event)
        results += sum(type(e).__name__ == "Finish" for e in effects)
    assert results <= 1
    assert (results == 1) == (state.phase == "finished")
