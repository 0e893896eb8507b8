"""SPEC B, C4–C7, F and G as the pure machine decides them: one example per behaviour.

Each test walks a scenario through `tests.support.driver.Driver` (which plays the shell: clock,
timer, Discord) and checks the effects the machine asked for and the result it produced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cordstream.domain import (
    ArmTimer,
    ChunkArrived,
    CloseProvider,
    ConsumeRequest,
    Delivered,
    DiscordFailure,
    DoneChunk,
    ErrorChunk,
    Event,
    Finish,
    FunctionCall,
    FunctionCallChunk,
    PauseOver,
    ProviderCrashed,
    ProviderEnded,
    ProviderError,
    Rejected,
    SendEmbed,
    SendMessage,
    Started,
    StopReason,
    StopRequest,
    StopRequested,
    StreamConfig,
    StreamResult,
    StreamStatus,
    TextChunk,
    Thought,
    TimerFired,
    TokenUsage,
    initial_state,
    outcome,
    record,
    step,
)
from cordstream.domain.catalogue import DEFAULT_CATALOGUE, ENGLISH
from cordstream.domain.outcome import Ending
from cordstream.domain.record import merged
from tests.support.driver import Driver, run

USAGE = {"prompt_tokens": 3, "completion_tokens": 4}
TOKENS = TokenUsage(input_tokens=3, output_tokens=4)
CALL = FunctionCall("search", {"q": "weather"}, id="call-1")
RATE_LIMITED = ProviderError("rate_limit", "slow down", retryable=True)
SECRET = "sk-ant-api03-Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC2eF4hJ6"


class Forbidden(Exception):
    """Stands in for discord.Forbidden (Missing Permissions, 50013)."""


class ServerError(Exception):
    """Stands in for discord.DiscordServerError (5xx after discord.py's retries)."""


def _embeds(driver: Driver) -> list[SendEmbed]:
    return [e for e in driver.effects if isinstance(e, SendEmbed)]


def _effect_types(driver: Driver, since: int) -> list[type]:
    return [type(e) for e in driver.effects[since:]]


def _delivered_hello(driver: Driver) -> None:
    """Start, deliver "Hello" with usage, thoughts, provider and details; leave "Wor" pending."""
    driver.start()
    driver.chunk(
        TextChunk(
            "<details><summary>Memory</summary>kept</details>",
            usage=USAGE,
            thoughts=(Thought("summary", "plan"),),
            serving_provider="prov",
        )
    )
    driver.text("Hello\nWor")
    assert driver.messages == ["Hello"]


# --- every way a stream ends ---------------------------------------------------------------


@dataclass(frozen=True)
class Exit:
    status: StreamStatus
    act: Callable[[Driver], object]
    config: StreamConfig = field(default_factory=StreamConfig)


def _reject_then_end(failure: DiscordFailure) -> Callable[[Driver], object]:
    def act(driver: Driver) -> object:
        driver.reject_next.append(failure)
        return driver.end()

    return act


EXITS: dict[str, Exit] = {
    "completed": Exit("completed", lambda d: d.end()),
    "function_call": Exit("function_call", lambda d: d.chunk(FunctionCallChunk(CALL))),
    "error_chunk": Exit("error", lambda d: d.chunk(ErrorChunk(RATE_LIMITED))),
    "provider_crash": Exit("error", lambda d: d.crash(RuntimeError("boom"))),
    "non_chunk": Exit("error", lambda d: d.chunk("garbage")),
    "timeout": Exit("timeout", lambda d: d.fire_timer()),
    "user_stop": Exit("stopped_by_user", lambda d: d.request(StopRequest("stop", "user-1"))),
    "follow_up": Exit(
        "follow_up_interrupt", lambda d: d.request(StopRequest("follow_up", "user-2"))
    ),
    "internal_stop": Exit(
        "stopped_by_user", lambda d: d.request(StopRequest.stop("missing_access"))
    ),
    "send_message_limit": Exit(
        "stopped_by_user",
        lambda d: d.text("ld\nmore\nx"),
        StreamConfig(delivery="messages", send_message_limit=1),
    ),
    "flush_limit": Exit(
        "stopped_by_user",
        lambda d: d.text("ld\nmore\nx"),
        StreamConfig(delivery="messages", flush_limit=1),
    ),
    "discord_failure": Exit(
        "error", _reject_then_end(DiscordFailure(50013, 403, Forbidden("Missing Permissions")))
    ),
    "channel_deleted": Exit("stopped_by_user", _reject_then_end(DiscordFailure(10003, 404, None))),
}
EMBED_EXITS = [
    "error_chunk",
    "provider_crash",
    "non_chunk",
    "timeout",
    "flush_limit",
    "discord_failure",
]


def _run_exit(name: str, *, suppress: bool = False) -> tuple[Driver, StreamResult]:
    exit_ = EXITS[name]
    driver = Driver(exit_.config, suppress_user_errors=suppress)
    _delivered_hello(driver)
    exit_.act(driver)
    return driver, driver.settle()


# --- B1: exactly one result ----------------------------------------------------------------


@pytest.mark.parametrize("name", list(EXITS))
def test_B1_every_exit_path_finishes_exactly_once(name: str) -> None:
    driver, result = _run_exit(name)

    assert result.status == EXITS[name].status
    assert len(driver.of_type(Finish)) == 1
    assert isinstance(driver.effects[-1], Finish)


AFTER_FINISH: dict[str, Callable[[float, float], Event]] = {
    "started": lambda now, armed: Started(now),
    "text": lambda now, armed: ChunkArrived(now, TextChunk("x")),
    "text with usage": lambda now, armed: ChunkArrived(now, TextChunk("a\nb\n", usage=USAGE)),
    "error chunk": lambda now, armed: ChunkArrived(now, ErrorChunk(RATE_LIMITED)),
    "provider ended": lambda now, armed: ProviderEnded(now),
    "provider crashed": lambda now, armed: ProviderCrashed(now, RuntimeError("late")),
    "stop": lambda now, armed: StopRequested(now, StopRequest("stop", "user-1")),
    "follow-up": lambda now, armed: StopRequested(now, StopRequest("follow_up", "user-1")),
    "timer": TimerFired,
    "pause over": lambda now, armed: PauseOver(now, 1),
    "delivered": lambda now, armed: Delivered(now, 1),
    "rejected": lambda now, armed: Rejected(now, 1, DiscordFailure(10003, 404)),
}


@pytest.mark.parametrize("name", list(AFTER_FINISH))
def test_B1_events_after_finish_are_no_ops(name: str) -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello\n")
    driver.end()
    assert driver.armed is not None
    state = driver.state
    event = AFTER_FINISH[name](driver.now + 200.0, driver.armed)

    effects = driver.feed(event)

    assert effects == ()
    assert driver.state == state


# --- B2: the inactivity deadline -------------------------------------------------------------


def test_B2_started_arms_the_timer_at_now_plus_timeout() -> None:
    driver = Driver(StreamConfig(delivery="messages", inactivity_timeout=30.0))
    driver.advance(5.0)

    effects = driver.start()

    assert effects == (ArmTimer(35.0),)
    assert driver.state.deadline == 35.0


@pytest.mark.parametrize("timeout", [0.001, 0.25, 0.5, 0.999])
def test_B2_an_inactivity_timeout_under_a_second_is_kept_to_the_millisecond(
    timeout: float,
) -> None:
    """A timeout between 0 and 1 s is valid (B2): armed, moved and fired in its own unit."""
    driver = Driver(StreamConfig(delivery="messages", inactivity_timeout=timeout))
    assert driver.start() == (ArmTimer(timeout),)
    driver.advance(timeout / 2)
    driver.text("Hello")  # moves the deadline
    assert driver.state.deadline == timeout / 2 + timeout
    driver.fire_timer(timeout)  # early: re-armed at the moved deadline
    assert driver.armed == timeout / 2 + timeout
    driver.fire_timer()
    result = driver.settle()
    assert result.status == "timeout"
    assert driver.messages == ["Hello"]


@pytest.mark.parametrize(("milliseconds", "seconds"), [("1", 0.001), ("250", 0.25), ("999", 0.999)])
def test_B2_inactivity_timeout_ms_under_a_second_is_read_from_the_environment(
    milliseconds: str, seconds: float
) -> None:
    config = StreamConfig.from_env({"INACTIVITY_TIMEOUT_MS": milliseconds})
    assert config.inactivity_timeout == seconds


@pytest.mark.parametrize(
    "chunk",
    [
        TextChunk("partial"),
        TextChunk(""),
        TextChunk("with usage", usage=USAGE),
        DoneChunk(),
        FunctionCallChunk(None),
        ErrorChunk(None),
    ],
    ids=["text", "empty keep-alive", "text with usage", "done", "no call", "no error"],
)
def test_B2_any_chunk_moves_the_deadline_without_effects(chunk: object) -> None:
    driver = Driver(StreamConfig(delivery="messages", inactivity_timeout=30.0))
    driver.start()
    driver.advance(10.0)

    effects = driver.feed(ChunkArrived(driver.now, chunk))

    assert effects == ()
    assert driver.state.deadline == 40.0


def test_B2_an_early_timer_rearms_at_the_current_deadline() -> None:
    driver = Driver(StreamConfig(delivery="messages", inactivity_timeout=30.0))
    driver.start()
    driver.advance(10.0)
    driver.text("still ")

    effects = driver.fire_timer()  # goes off at 30 s; the chunk moved the deadline to 40 s

    assert effects == (ArmTimer(40.0),)
    assert driver.result is None


def test_B2_a_stale_timer_is_a_no_op() -> None:
    driver = Driver(StreamConfig(delivery="messages", inactivity_timeout=30.0))
    driver.start()
    driver.advance(10.0)
    driver.text("still ")
    driver.fire_timer()  # re-armed for 40 s
    driver.advance(11.0)  # 41 s: past the deadline, but this report is for the 30 s arming
    state = driver.state

    effects = driver.feed(TimerFired(driver.now, armed_for=30.0))

    assert effects == ()
    assert driver.state == state


def test_B2_a_due_timer_times_out() -> None:
    driver = Driver(StreamConfig(delivery="messages", inactivity_timeout=30.0))
    driver.start()

    driver.fire_timer()

    result = driver.settle()
    assert result.status == "timeout"
    assert driver.now == 30.0


def test_B2_a_rearmed_timer_times_out_at_the_moved_deadline() -> None:
    driver = Driver(StreamConfig(delivery="messages", inactivity_timeout=30.0))
    driver.start()
    driver.advance(10.0)
    driver.text("still ")
    driver.fire_timer()  # early: re-armed for 40 s

    driver.fire_timer()

    assert driver.settle().status == "timeout"
    assert driver.now == 40.0


# --- B4: requests registered before the stream -------------------------------------------------


def test_B4_pending_stop_resolves_before_the_provider() -> None:
    stop = StopRequest("stop", "user-1")
    driver = Driver()

    driver.start(pending=stop)

    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_reason == "user_request"
    assert driver.of_type(ArmTimer) == []
    assert driver.consumed == [stop]
    assert driver.sends == []
    assert not driver.state.wants_chunks


def test_B4_pending_follow_up_resolves_before_the_provider() -> None:
    follow_up = StopRequest("follow_up", "user-1")
    driver = Driver()

    driver.start(pending=follow_up)

    result = driver.settle()
    assert result.status == "follow_up_interrupt"
    assert driver.of_type(ArmTimer) == []
    assert driver.consumed == [follow_up]


# --- B5: what each chunk records ---------------------------------------------------------------


def test_B5_latest_valid_usage_wins() -> None:
    driver = Driver()
    driver.start()
    driver.chunk(TextChunk("a", usage={"prompt_tokens": 1, "completion_tokens": 2}))

    driver.chunk(TextChunk("b", usage={"input_tokens": 5, "output_tokens": 6}))

    assert driver.end().usage == TokenUsage(5, 6)  # replaced, not summed (D3)


_REPORTS = st.one_of(
    st.none(),
    st.builds(
        lambda i, o: {"input_tokens": i, "output_tokens": o},
        st.integers(0, 50),
        st.integers(0, 50),
    ),
    st.sampled_from([{"input_tokens": -1}, {"prompt_tokens": "x"}, {}, 7, "usage"]),
)
_RUNS = st.lists(
    st.one_of(st.text(max_size=4), st.builds(TextChunk, st.text(max_size=4), usage=_REPORTS)),
    min_size=1,
    max_size=8,
)


@given(_RUNS)
def test_E10_D3_a_merged_run_is_the_text_and_the_usage_noting_each_chunk_keeps(
    run: list[TextChunk | str],
) -> None:
    """The provider's task feeds a run of text read at once as one chunk (`record.merged`):
    the core must end up with the same text and the same usage as from each chunk alone."""
    chunk = merged(run)
    assert isinstance(chunk, TextChunk)
    assert chunk.content == "".join(i if isinstance(i, str) else i.content for i in run)
    one_by_one = record.EMPTY
    for item in run:
        one_by_one = record.note(one_by_one, TextChunk(item) if isinstance(item, str) else item)
    assert record.note(record.EMPTY, chunk).usage == one_by_one.usage
    assert chunk.thoughts == ()
    assert chunk.serving_provider is None


def test_E10_a_run_of_one_chunk_is_that_chunk() -> None:
    alone = TextChunk("a", usage={"oops": 1})
    assert merged([alone]) is alone
    assert merged(["a"]) == TextChunk("a")


@pytest.mark.parametrize(
    "chunk",
    [
        TextChunk("", usage=USAGE),
        DoneChunk(usage=USAGE),
        ErrorChunk(None, usage=USAGE),
        FunctionCallChunk(None, usage=USAGE),
    ],
    ids=["text", "done", "error without error", "function call without call"],
)
def test_B5_usage_is_read_from_any_chunk_type(chunk: object) -> None:
    driver = Driver()
    driver.start()
    driver.chunk(TextChunk("Hi", usage={"prompt_tokens": 1, "completion_tokens": 1}))

    driver.chunk(chunk)

    assert driver.end().usage == TOKENS


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "5", "completion_tokens": "7"},
        {"prompt_tokens": -1, "completion_tokens": -3},
        {"prompt_tokens": 0, "completion_tokens": 0},
        "garbage",
    ],
    ids=["strings", "negative", "zeros", "not usage"],
)
def test_B5_invalid_usage_does_not_erase_earlier_usage(usage: object) -> None:
    driver = Driver()
    driver.start()
    driver.chunk(TextChunk("Hi", usage=USAGE))

    driver.chunk(TextChunk(" there", usage=usage))

    assert driver.end().usage == TOKENS


@pytest.mark.parametrize(
    "chunk",
    [FunctionCallChunk(CALL, usage=USAGE), ErrorChunk(RATE_LIMITED, usage=USAGE)],
    ids=["function call", "error"],
)
def test_B5_the_ending_chunks_usage_is_recorded_before_routing(chunk: object) -> None:
    driver = Driver()
    driver.start()

    driver.chunk(chunk)

    assert driver.settle().usage == TOKENS


def test_B5_first_non_empty_serving_provider_wins() -> None:
    driver = Driver()
    driver.start()
    driver.chunk(TextChunk("a", serving_provider=""))
    driver.chunk(TextChunk("b", serving_provider="Groq"))

    driver.chunk(DoneChunk(serving_provider="Together"))

    log = driver.end().thought_log
    assert log is not None
    assert log.serving_provider == "Groq"


def test_B5_done_metadata_replaces_earlier_metadata() -> None:
    driver = Driver()
    driver.start()
    driver.chunk(DoneChunk({"finish_reason": "length"}))

    driver.chunk(DoneChunk({"finish_reason": "stop"}))

    assert driver.end().data == {"finish_reason": "stop"}


def test_B5_done_without_metadata_does_not_erase_it() -> None:
    driver = Driver()
    driver.start()
    driver.chunk(DoneChunk({"finish_reason": "stop"}))

    driver.chunk(DoneChunk())

    assert driver.end().data == {"finish_reason": "stop"}


def test_B5_thoughts_are_recorded_by_kind_in_arrival_order() -> None:
    driver = Driver()
    driver.start()
    driver.chunk(TextChunk("Hi", thoughts=(Thought("summary", "Plan: "), Thought("raw", "r1 "))))
    driver.chunk(ErrorChunk(None, thoughts=(Thought("raw", "r2"),)))

    driver.chunk(DoneChunk(thoughts=(Thought("summary", "answer."),)))

    log = driver.end().thought_log
    assert log is not None
    assert log.summary == "Plan: answer."
    assert log.raw == "r1 r2"
    assert driver.messages == ["Hi"]  # thoughts never reach the channel (E4)


# --- B6: routing -------------------------------------------------------------------------------


def test_B6_text_after_done_is_still_delivered() -> None:
    driver = Driver()
    driver.start()
    driver.chunk(DoneChunk({"finish_reason": "stop"}))

    driver.text("late\n", "words")

    result = driver.end()
    assert result.status == "completed"
    assert driver.messages == ["late", "words"]


def test_B6_function_call_flushes_pending_text_before_the_result() -> None:
    driver = Driver()
    driver.start()
    driver.text("Let me look that up")
    assert driver.sends == []

    driver.chunk(FunctionCallChunk(CALL))

    result = driver.settle()
    assert driver.messages == ["Let me look that up"]
    assert result.status == "function_call"


def test_B6_function_call_result_has_the_first_call_as_data_and_all_calls() -> None:
    other = FunctionCall("clock", {}, id="call-2")
    driver = Driver()
    driver.start()

    driver.chunk(FunctionCallChunk([CALL, other]))

    result = driver.settle()
    assert result.data == CALL
    assert result.function_calls == (CALL, other)


@pytest.mark.parametrize(
    "chunk",
    [FunctionCallChunk(None), FunctionCallChunk([]), ErrorChunk(None)],
    ids=["null call", "no calls", "null error"],
)
def test_B6_chunk_without_call_or_error_is_ignored(chunk: object) -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello ")

    driver.chunk(chunk)

    assert driver.state.wants_chunks
    assert driver.of_type(CloseProvider) == []
    driver.text("world")
    assert driver.end().status == "completed"
    assert driver.messages == ["Hello world"]


def test_B6_error_chunk_flushes_then_shows_the_embed_then_returns_error() -> None:
    driver = Driver()
    driver.start()
    driver.text("Half an answ")
    before = len(driver.effects)

    driver.chunk(ErrorChunk(RATE_LIMITED))

    result = driver.settle()
    assert _effect_types(driver, before) == [CloseProvider, SendMessage, SendEmbed, Finish]
    assert driver.messages == ["Half an answ"]
    assert result.status == "error"
    assert result.data is RATE_LIMITED


# --- B7, B8: the provider is exhausted ---------------------------------------------------------


def test_B7_exhausted_provider_flushes_and_completes_with_the_metadata() -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello\nWor")
    driver.chunk(DoneChunk({"finish_reason": "stop"}))

    result = driver.end()

    assert driver.messages == ["Hello", "Wor"]
    assert result.status == "completed"
    assert result.data == {"finish_reason": "stop"}


def test_B7_completed_without_done_has_no_data() -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello")

    result = driver.end()

    assert result.status == "completed"
    assert result.data is None


def test_B8_empty_response_keeps_usage_data_and_thought_log() -> None:
    driver = Driver()
    driver.start()
    driver.chunk(TextChunk("<think>pondering</think>  \n", usage=USAGE))
    driver.chunk(DoneChunk({"finish_reason": "stop"}, thoughts=(Thought("summary", "plan"),)))

    result = driver.end()

    assert driver.sends == []
    assert result.status == "empty_response"
    assert result.usage == TOKENS
    assert result.data == {"finish_reason": "stop"}
    assert result.thought_log is not None
    assert result.thought_log.raw == "pondering"
    assert result.thought_log.summary == "plan"


def test_B8_function_call_without_text_is_not_an_empty_response() -> None:
    driver = Driver()
    driver.start()

    driver.chunk(FunctionCallChunk(CALL))

    assert driver.settle().status == "function_call"


# --- B9, B10: every exit path ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(EXITS))
def test_B9_every_status_carries_what_was_delivered(name: str) -> None:
    driver, result = _run_exit(name)

    assert result.status == EXITS[name].status
    assert result.messages[0] == "Hello"
    assert result.messages == tuple(driver.messages)
    assert result.accumulated_text == "\n".join(driver.messages)
    assert result.messages_sent == len(driver.messages)
    assert result.usage == TOKENS
    assert result.thought_log is not None
    assert result.thought_log.summary == "plan"
    assert result.thought_log.serving_provider == "prov"
    assert result.details_content == "kept"


@pytest.mark.parametrize("name", list(EXITS))
def test_B9_F2_every_status_carries_its_messages_joined_by_line_breaks(name: str) -> None:
    """Two messages accepted before the stream ends, whatever way it ends (stop, error,
    timeout, follow-up, limits, Discord failures): the result has both, in order, and its
    text keeps the line break between them."""
    exit_ = EXITS[name]
    driver = Driver(exit_.config)
    driver.start()
    driver.text("Hello\nthe")
    driver.text("re\nWor")  # "there" leaves as a message of its own; "Wor" is pending
    exit_.act(driver)
    result = driver.settle()

    assert result.status == exit_.status
    assert result.messages == tuple(driver.messages)
    assert result.messages_sent == len(result.messages)
    assert result.accumulated_text == "\n".join(result.messages)
    if 1 in (exit_.config.send_message_limit, exit_.config.flush_limit):
        assert result.messages == ("Hello",)  # F3: the limit stopped the second one
    else:
        assert result.messages[:2] == ("Hello", "there")
        assert result.accumulated_text.startswith("Hello\nthere")


@pytest.mark.parametrize("name", list(EXITS))
def test_B10_every_exit_path_closes_the_provider_once(name: str) -> None:
    driver, _ = _run_exit(name)

    assert driver.of_type(CloseProvider) == [CloseProvider()]


def test_B10_pending_request_closes_the_provider_unread() -> None:
    driver = Driver()

    driver.start(pending=StopRequest("stop", None))

    assert driver.closed
    assert driver.of_type(CloseProvider) == [CloseProvider()]


# --- B12: timeout -------------------------------------------------------------------------------


def test_B12_timeout_flushes_first_then_the_timeout_embed_then_the_result() -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello\nWor")
    before = len(driver.effects)

    driver.fire_timer()

    result = driver.settle()
    assert _effect_types(driver, before) == [CloseProvider, SendMessage, SendEmbed, Finish]
    assert driver.messages == ["Hello", "Wor"]
    assert [(e.title, e.colour) for e in driver.embeds] == [("Response timed out", "warning")]
    assert result.status == "timeout"


# --- B13: exceptions ----------------------------------------------------------------------------


def test_B13_provider_crash_shows_the_generic_error_embed_and_returns_the_exception() -> None:
    error = ConnectionResetError("connection reset by peer")
    driver = Driver()
    driver.start()

    result = driver.crash(error)

    assert result.status == "error"
    assert result.data is error
    assert [(e.title, e.description, e.colour) for e in driver.embeds] == [
        ("Something went wrong", "connection reset by peer", "error")
    ]


def test_B13_crash_does_not_flush_the_pending_text() -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello\nhalf a sent")

    result = driver.crash(RuntimeError("boom"))

    assert driver.messages == ["Hello"]
    assert result.accumulated_text == "Hello"


@pytest.mark.parametrize("garbage", ["garbage", None, {"content": "hi"}, 42])
def test_B13_non_chunk_from_process_chunk_is_an_error_with_a_type_error(garbage: object) -> None:
    driver = Driver()
    driver.start()
    driver.text("pending")

    driver.chunk(garbage)

    result = driver.settle()
    assert result.status == "error"
    assert isinstance(result.data, TypeError)
    assert driver.sends == []  # the stream is broken: nothing pending is flushed
    assert [e.title for e in driver.embeds] == ["Something went wrong"]


@pytest.mark.parametrize(
    ("garbage", "name"), [("garbage", "str"), (None, "NoneType"), ({"a": 1}, "dict"), (42, "int")]
)
def test_B13_the_error_names_the_type_process_chunk_returned(garbage: object, name: str) -> None:
    driver = Driver()
    driver.start()
    driver.chunk(garbage)
    result = driver.settle()
    assert str(result.data) == f"process_chunk returned {name}, expected a ProcessedChunk"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: TextChunk(42), "TextChunk: content must be str, got int"),  # type: ignore[arg-type]
        (lambda: TextChunk(b"x"), "TextChunk: content must be str, got bytes"),  # type: ignore[arg-type]
        (
            lambda: TextChunk("x", serving_provider=3.5),  # type: ignore[arg-type]
            "TextChunk: serving_provider must be str or None, got float",
        ),
        (
            lambda: DoneChunk(serving_provider=[]),  # type: ignore[arg-type]
            "DoneChunk: serving_provider must be str or None, got list",
        ),
        (lambda: FunctionCall(7, {}), "FunctionCall: name must be str"),  # type: ignore[arg-type]
        (lambda: FunctionCall("f", []), "FunctionCall: arguments must be a mapping"),  # type: ignore[arg-type]
        (lambda: FunctionCall("f", {}, id=5), "FunctionCall: id must be str"),  # type: ignore[arg-type]
        (lambda: Thought("raw", 5), "Thought: content must be str"),  # type: ignore[arg-type]
        (lambda: Thought("other", "x"), "Thought: unknown kind 'other'"),  # type: ignore[arg-type]
        (
            lambda: ProviderError("bogus", "m"),  # type: ignore[arg-type]
            "ProviderError: unknown kind 'bogus'",
        ),
        (  # not iterable at all: the check says so, not `tuple()`'s own error
            lambda: FunctionCallChunk(5),  # type: ignore[arg-type]
            "FunctionCallChunk: call must be a FunctionCall, a sequence of them, or None",
        ),
        (  # iterable but not a sequence: no order to run the calls in
            lambda: FunctionCallChunk(frozenset({FunctionCall("f", {})})),  # type: ignore[arg-type]
            "FunctionCallChunk: call must be a FunctionCall, a sequence of them, or None",
        ),
    ],
)
def test_B13_a_chunk_built_with_a_bad_field_names_the_type_it_got(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(TypeError) as raised:
        build()
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("content", 7, "TextChunk: content must be str, got int"),
        ("content", None, "TextChunk: content must be str, got NoneType"),
        ("serving_provider", 1, "TextChunk: serving_provider must be str or None, got int"),
    ],
)
def test_B13_a_field_smuggled_past_validation_is_named_with_its_type(
    field: str, value: object, message: str
) -> None:
    driver = Driver()
    driver.start()
    driver.text("pending")
    driver.chunk(_smuggled(TextChunk("x", thoughts=(Thought("raw", "t"),)), field, value))
    result = driver.settle()
    assert result.status == "error"
    assert isinstance(result.data, TypeError)
    assert str(result.data) == message


@pytest.mark.parametrize(
    ("chunk", "field", "value", "message"),
    [
        (DoneChunk(), "metadata", 5, "DoneChunk: metadata must be a mapping or None"),
        (DoneChunk(), "serving_provider", 1, "DoneChunk: serving_provider must be str or None"),
        (ErrorChunk(None), "error", "boom", "ErrorChunk: error must be a ProviderError or None"),
        (
            FunctionCallChunk(None),
            "call",
            5,
            "FunctionCallChunk: call must be a FunctionCall, a sequence of them, or None",
        ),
    ],
    ids=["done-metadata", "done-serving", "error-error", "call-call"],
)
def test_B13_a_field_smuggled_into_any_chunk_type_is_named_with_its_owner(
    chunk: object, field: str, value: object, message: str
) -> None:
    """Every chunk type off the hot path is checked, and the error names the chunk's own type
    (for the bot author reading a log: which of their chunks was broken)."""
    driver = Driver()
    driver.start()
    driver.chunk(_smuggled(chunk, field, value))
    result = driver.settle()
    assert result.status == "error"
    assert isinstance(result.data, TypeError)
    assert str(result.data).startswith(message)


# --- C4–C7: requests inside the stream ----------------------------------------------------------


@pytest.mark.parametrize(
    ("requester", "reason"),
    [
        (None, "system_request"),
        ("", "system_request"),
        ("send_message_limit", "send_message_limit"),
        ("flush_limit", "flush_limit"),
        ("channel_deleted", "channel_deleted"),
        ("missing_access", "missing_access"),
        ("user-1", "user_request"),
    ],
)
def test_C4_stop_resolves_with_the_requesters_reason(
    requester: str | None, reason: StopReason
) -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello")

    driver.request(StopRequest.stop(requester))

    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_reason == reason


def test_C5_the_resolved_entry_is_consumed() -> None:
    stop = StopRequest("stop", "user-1")
    driver = Driver()
    driver.start()

    effects = driver.request(stop)

    consumed = [e for e in effects if isinstance(e, ConsumeRequest)]
    assert len(consumed) == 1
    assert consumed[0].request is stop


def test_C5_follow_up_after_a_resolved_stop_is_not_consumed() -> None:
    stop = StopRequest("stop", "user-1")
    follow_up = StopRequest("follow_up", "user-2")
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("Hello\nWor")  # "Hello" is in flight
    driver.request(stop)

    effects = driver.request(follow_up)

    assert not any(isinstance(e, ConsumeRequest) for e in effects)
    assert driver.consumed == [stop]
    assert driver.settle().status == "stopped_by_user"


def test_C5_second_stop_while_stopping_is_consumed_and_changes_nothing() -> None:
    first = StopRequest("stop", "user-1", context="first")
    second = StopRequest("stop", "user-2", context="second")
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("Hello\nWor")
    driver.request(first)

    driver.request(second)

    assert driver.consumed == [first, second]
    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_context == "first"


def test_C5_request_after_the_result_is_not_consumed() -> None:
    driver = Driver()
    driver.start()
    driver.end()

    effects = driver.request(StopRequest("stop", "user-1"))

    assert effects == ()
    assert driver.consumed == []


def test_C5_stop_while_a_completed_answer_drains_is_resolved() -> None:
    stop = StopRequest("stop", "user-1")
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("Hello\nWor")  # "Hello" is in flight
    driver.feed(ProviderEnded(driver.now))

    driver.request(stop)

    result = driver.settle()
    assert driver.consumed == [stop]
    assert result.status == "stopped_by_user"
    assert driver.messages == ["Hello", "Wor"]  # the stop flushes what is left


def test_C6_user_stop_flushes_the_pending_text() -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello\nWor")

    driver.request(StopRequest("stop", "user-1"))

    assert driver.settle().status == "stopped_by_user"
    assert driver.messages == ["Hello", "Wor"]


def test_C6_system_stop_flushes_the_pending_text() -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello\nWor")

    driver.request(StopRequest("stop", None))

    assert driver.settle().stop_reason == "system_request"
    assert driver.messages == ["Hello", "Wor"]


def test_C6_follow_up_discards_the_pending_text() -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello\nWor")

    driver.request(StopRequest("follow_up", "user-1"))

    result = driver.settle()
    assert result.status == "follow_up_interrupt"
    assert driver.messages == ["Hello"]
    assert result.accumulated_text == "Hello"


def test_C6_follow_up_while_a_completed_answer_drains_discards_the_rest() -> None:
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("Hello\nWor")  # "Hello" is in flight
    driver.feed(ProviderEnded(driver.now))

    driver.request(StopRequest("follow_up", "user-1"))

    assert driver.settle().status == "follow_up_interrupt"
    assert driver.messages == ["Hello"]


@pytest.mark.parametrize(
    "requester", ["send_message_limit", "flush_limit", "channel_deleted", "missing_access"]
)
def test_C6_internal_stop_does_not_flush(requester: str) -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello\nWor")

    driver.request(StopRequest.stop(requester))

    assert driver.settle().status == "stopped_by_user"
    assert driver.messages == ["Hello"]


def test_C7_stop_context_is_returned() -> None:
    context = object()
    driver = Driver()
    driver.start()
    driver.text("Hello")

    driver.request(StopRequest("stop", "user-1", context=context))

    assert driver.settle().stop_context is context


def test_C7_pending_stop_context_is_returned() -> None:
    context = object()
    driver = Driver()

    driver.start(pending=StopRequest("stop", "user-1", context=context))

    assert driver.settle().stop_context is context


def test_C7_stop_context_survives_a_deleted_channel_during_the_flush() -> None:
    context = object()
    driver = Driver()
    driver.start()
    driver.text("Hello\nWor")
    driver.reject_next.append(DiscordFailure(10003, 404))

    driver.request(StopRequest("stop", "user-1", context=context))  # flushing "Wor" fails

    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_reason == "channel_deleted"
    assert result.stop_context is context


# --- C2, C5, C7: requests while the last messages are in flight --------------------------------
# The outcome is decided and a message is still on its way to Discord (a 429, a slow reply):
# which later entry overrides which outcome (the table of `requests.resolve`).


def _in_flight_then_follow_up() -> tuple[Driver, StopRequest]:
    """ "First line" in flight, "Second" pending; a follow-up resolved (and consumed)."""
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("First line\nSecond")
    assert isinstance(driver.pending_send, SendMessage)
    follow_up = StopRequest("follow_up", "bob")
    driver.request(follow_up)
    assert driver.consumed == [follow_up]
    assert driver.state.core.ending is not None
    assert driver.state.core.ending.status == "follow_up_interrupt"
    return driver, follow_up


@pytest.mark.parametrize(
    ("requester", "reason"), [("bob", "user_request"), (None, "system_request")]
)
def test_C2_a_stop_after_a_resolved_follow_up_wins_until_the_result_exists(
    requester: str | None, reason: StopReason
) -> None:
    driver, follow_up = _in_flight_then_follow_up()
    stop = StopRequest.stop(requester, context="the /stop")

    driver.advance(0.05)
    effects = driver.request(stop)

    assert ConsumeRequest(stop) in effects
    assert driver.consumed == [follow_up, stop]
    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_reason == reason
    assert result.stop_context == "the /stop"  # C7
    assert driver.messages == ["First line", "Second"]  # C6: the stop delivers what was dropped


def test_C2_a_stop_after_a_follow_up_delivers_all_it_dropped_with_open_markup_closed() -> None:
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("Intro\n", "<think>hm</think>```py\nx = 1\n```\n", "and **bold")
    driver.request(StopRequest("follow_up", "bob"))
    assert driver.sends == [SendMessage(1, "Intro", reply=True)]

    driver.request(StopRequest("stop", "bob", context="ctx"))

    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert driver.messages == ["Intro", "```py\nx = 1\n```\nand **bold**"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "hm"


@pytest.mark.parametrize("requester", ["send_message_limit", "flush_limit", "channel_deleted"])
def test_C2_C7_an_internal_stop_id_after_a_follow_up_wins_and_sends_nothing_more(
    requester: str,
) -> None:
    driver, follow_up = _in_flight_then_follow_up()
    stop = StopRequest.stop(requester, context="ops")

    driver.request(stop)

    assert driver.consumed == [follow_up, stop]
    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_reason == requester
    assert result.stop_context == "ops"  # C7: an internal id keeps its caller's context too
    assert driver.messages == ["First line"]


def test_C5_a_follow_up_while_answering_a_follow_up_is_left_for_the_next_stream() -> None:
    driver, _ = _in_flight_then_follow_up()
    second = StopRequest("follow_up", "carol")

    effects = driver.request(second)

    assert not any(isinstance(e, ConsumeRequest) for e in effects)
    result = driver.settle()
    assert result.status == "follow_up_interrupt"
    assert result.stop_context is None
    assert driver.messages == ["First line"]


def test_C2_follow_up_then_stop_then_follow_up_the_stop_stays_the_outcome() -> None:
    driver, _ = _in_flight_then_follow_up()
    stop = StopRequest("stop", "bob", context="ctx")
    driver.request(stop)
    later = StopRequest("follow_up", "carol")

    effects = driver.request(later)

    assert not any(isinstance(e, ConsumeRequest) for e in effects)  # left for the next stream
    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_context == "ctx"


def test_C5_C7_a_system_stop_then_a_user_stop_the_first_stays() -> None:
    system = StopRequest("stop", None, context="shutdown")
    user = StopRequest("stop", "bob", context="the /stop")
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("First line\nSecond")
    driver.request(system)

    effects = driver.request(user)

    assert ConsumeRequest(user) in effects  # already stopping: absorbed
    result = driver.settle()
    assert result.stop_reason == "system_request"
    assert result.stop_context == "shutdown"
    assert driver.messages == ["First line", "Second"]


def _flush_limit_warning_in_flight() -> Driver:
    """flush_limit=1: "one" sent, the limit stops the stream, its warning embed is in flight."""
    driver = Driver(StreamConfig(delivery="messages", flush_limit=1), auto_deliver=False)
    driver.start()
    driver.text("one\n", "two\n", "three")
    driver.deliver()  # "one"
    assert isinstance(driver.pending_send, SendEmbed)
    ending = driver.state.core.ending
    assert ending is not None
    assert ending.stop_reason == "flush_limit"
    return driver


@pytest.mark.parametrize("requester", ["bob", None, "send_message_limit"])
def test_C5_a_stop_during_an_internal_stop_stays_in_the_registry(requester: str | None) -> None:
    driver = _flush_limit_warning_in_flight()
    stop = StopRequest.stop(requester, context="the /stop")

    effects = driver.request(stop)

    assert effects == ()  # the outcome is fixed: not consumed, the bot sees it
    assert driver.consumed == []
    result = driver.settle()
    assert result.stop_reason == "flush_limit"
    assert result.stop_context is None
    assert driver.messages == ["one"]


def test_C5_a_stop_during_an_internal_stop_from_outside_stays_in_the_registry() -> None:
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("First line\nSecond")
    internal = StopRequest.stop("missing_access", context="ops")
    driver.request(internal)
    user = StopRequest("stop", "bob", context="the /stop")

    assert driver.request(user) == ()

    assert driver.consumed == [internal]
    result = driver.settle()
    assert result.stop_reason == "missing_access"
    assert result.stop_context == "ops"


def test_C5_C7_a_stop_during_a_channel_lost_while_answering_a_follow_up_stays() -> None:
    driver, _follow_up = _in_flight_then_follow_up()
    driver.reject(DiscordFailure(10003, 404))  # the channel is gone: the outcome is fixed
    assert driver.result is not None  # nothing was left in flight: the result exists already
    stop = StopRequest("stop", "bob", context="ctx")

    assert driver.request(stop) == ()

    assert driver.result.stop_reason == "channel_deleted"
    assert driver.result.stop_context is None


def test_C7_the_context_of_a_stop_that_overrode_a_follow_up_survives_a_lost_channel() -> None:
    driver, _follow_up = _in_flight_then_follow_up()
    driver.request(StopRequest("stop", "bob", context="ctx"))
    driver.reject_next.append(DiscordFailure(10003, 404))

    driver.deliver()  # "First line"; flushing "Second" then finds the channel gone

    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_reason == "channel_deleted"
    assert result.stop_context == "ctx"
    assert driver.messages == ["First line"]


def test_C5_a_refused_send_while_answering_a_follow_up_ends_it_at_once() -> None:
    driver, _follow_up = _in_flight_then_follow_up()
    driver.reject(DiscordFailure(50013, 403, RuntimeError("Missing Permissions")))
    assert driver.result is not None
    assert driver.result.status == "follow_up_interrupt"

    assert driver.request(StopRequest("stop", "bob")) == ()  # after the result: not consumed
    assert driver.messages == []


def _natural_ending(driver: Driver, outcome: str) -> None:
    match outcome:
        case "completed":
            driver.feed(ProviderEnded(driver.now))
        case "function_call":
            driver.chunk(FunctionCallChunk(CALL))
        case "timeout":
            driver.fire_timer()
        case "error":
            driver.chunk(ErrorChunk(RATE_LIMITED))


@pytest.mark.parametrize("outcome", ["completed", "function_call", "timeout", "error"])
def test_C2_C5_on_a_natural_outcome_follow_up_then_stop_the_stop_wins(outcome: str) -> None:
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("First line\nSecond")  # "First line" in flight
    _natural_ending(driver, outcome)
    follow_up = StopRequest("follow_up", "bob")
    stop = StopRequest("stop", "bob", context="ctx")

    driver.request(follow_up)
    driver.request(stop)

    assert driver.consumed == [follow_up, stop]
    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_context == "ctx"
    assert driver.messages == ["First line", "Second"]
    assert driver.embeds == []  # the stop's outcome has no embed


@pytest.mark.parametrize("outcome", ["completed", "function_call", "timeout", "error"])
def test_C5_C7_on_a_natural_outcome_stop_then_follow_up_the_stop_stays(outcome: str) -> None:
    driver = Driver(auto_deliver=False)
    driver.start()
    driver.text("First line\nSecond")
    _natural_ending(driver, outcome)
    stop = StopRequest("stop", "bob", context="ctx")
    follow_up = StopRequest("follow_up", "bob")

    driver.request(stop)
    driver.request(follow_up)

    assert driver.consumed == [stop]  # the follow-up is left for the next stream
    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_context == "ctx"
    assert driver.messages == ["First line", "Second"]


def test_C2_E9_a_stop_after_a_follow_up_delivers_without_typing_pauses() -> None:
    driver = Driver(StreamConfig(delivery="messages", humanizer_degree=2), auto_deliver=False)
    driver.start()
    driver.text("First line\n", "Second line\n", "Third\n", "Fourth")
    assert driver.pending_send is not None  # "First line"
    driver.request(StopRequest("follow_up", "bob"))
    driver.request(StopRequest("stop", "bob", context="ctx"))

    driver.deliver()

    assert driver.pause is None
    assert driver.pending_send is not None
    result = driver.settle()
    assert driver.messages == ["First line", "Second line\nThird\nFourth"]
    assert result.stop_context == "ctx"


def test_E9_B3_a_follow_up_during_a_typing_pause_ends_the_stream_at_once() -> None:
    driver = Driver(StreamConfig(delivery="messages", humanizer_degree=2))
    driver.start()
    driver.text("First line\n", "Second line\n", "Third")
    assert driver.pause is not None

    driver.request(StopRequest("follow_up", "bob"))

    assert driver.result is not None  # nothing to send: no waiting for the pause to end
    assert driver.result.status == "follow_up_interrupt"
    assert driver.messages == ["First line"]


def test_C5_a_stop_after_a_follow_up_result_is_not_consumed() -> None:
    driver = Driver()
    driver.start()
    driver.text("First line\nSecond")
    driver.request(StopRequest("follow_up", "bob"))
    assert driver.result is not None  # nothing was in flight: the result exists at once

    assert driver.request(StopRequest("stop", "bob")) == ()
    assert driver.result.status == "follow_up_interrupt"


def test_B13_the_first_error_stays_the_outcome_when_its_flush_is_refused() -> None:
    error = ProviderError("api_error", "upstream failed")
    driver = Driver()
    driver.start()
    driver.text("Hello\nWor")
    driver.reject_next.append(DiscordFailure(50013, 403, RuntimeError("Missing Permissions")))

    driver.chunk(ErrorChunk(error))  # flushing "Wor" is refused

    result = driver.settle()
    assert result.status == "error"
    assert result.data is error


# --- F1–F4: delivery ------------------------------------------------------------------------------


def test_F1_first_message_replies_later_ones_do_not() -> None:
    driver = Driver()
    driver.start()

    driver.text("one\n", "two\n", "three")
    driver.end()

    assert [(s.content, s.reply) for s in driver.sends] == [
        ("one", True),
        ("two", False),
        ("three", False),
    ]


def test_F2_accumulated_text_joins_the_accepted_messages_with_line_breaks() -> None:
    driver = Driver()
    driver.start()
    driver.text("one\n", "two\n", "three")

    result = driver.end()

    assert driver.messages == ["one", "two", "three"]
    assert result.messages == ("one", "two", "three")
    assert result.accumulated_text == "one\ntwo\nthree"  # not "onetwothree" (F2, revised)
    assert result.messages_sent == 3


def test_F2_a_message_of_two_lines_and_a_message_of_one_give_three_lines() -> None:
    driver = Driver()
    driver.start()
    driver.text("one\ntwo\nthr")  # two lines ready at once share a message
    driver.text("ee")

    result = driver.end()

    assert result.messages == ("one\ntwo", "three")
    assert result.accumulated_text == "one\ntwo\nthree"
    assert result.messages_sent == 2


def test_F2_refused_message_is_not_accumulated() -> None:
    driver = Driver()
    driver.start()
    driver.text("one\nt")
    driver.reject_next.append(DiscordFailure(None, 503, ServerError("503 Service Unavailable")))

    driver.text("wo\nthree")  # "two" is refused

    result = driver.settle()
    assert [s.content for s in driver.sends] == ["one", "two"]
    assert result.messages == ("one",)
    assert result.accumulated_text == "one"
    assert result.messages_sent == 1


def test_F3_send_message_limit_stops_quietly() -> None:
    driver = Driver(StreamConfig(delivery="messages", send_message_limit=2))
    driver.start()

    driver.text("one\n", "two\n", "three\n", "four")

    result = driver.settle()
    assert driver.messages == ["one", "two"]
    assert result.status == "stopped_by_user"
    assert result.stop_reason == "send_message_limit"
    assert _embeds(driver) == []
    assert driver.closed


def test_F3_flush_limit_stops_with_one_warning_embed() -> None:
    driver = Driver(StreamConfig(delivery="messages", flush_limit=2))
    driver.start()

    driver.text("one\n", "two\n", "three\n", "four\n", "five")

    result = driver.settle()
    assert driver.messages == ["one", "two"]
    assert result.status == "stopped_by_user"
    assert result.stop_reason == "flush_limit"
    assert [(e.embed.title, e.embed.colour) for e in _embeds(driver)] == [
        ("Message limit reached", "warning")
    ]


def test_F3_limit_reached_by_the_final_flush_stops_too() -> None:
    driver = Driver(StreamConfig(delivery="messages", send_message_limit=1))
    driver.start()
    driver.text("one\n", "two")

    result = driver.end()

    assert driver.messages == ["one"]
    assert result.stop_reason == "send_message_limit"


@pytest.mark.parametrize(
    "config",
    [
        StreamConfig(delivery="messages", send_message_limit=2),
        StreamConfig(delivery="messages", flush_limit=2),
    ],
    ids=["send_message_limit", "flush_limit"],
)
def test_F3_answer_exactly_at_the_limit_completes(config: StreamConfig) -> None:
    driver = Driver(config)
    driver.start()
    driver.text("one\n", "two")

    result = driver.end()

    assert driver.messages == ["one", "two"]
    assert result.status == "completed"
    assert result.stop_reason is None
    assert _embeds(driver) == []


@pytest.mark.parametrize(
    ("code", "reason"), [(10003, "channel_deleted"), (50001, "missing_access")]
)
def test_F4_lost_channel_stops_quietly(code: int, reason: StopReason) -> None:
    driver = Driver()
    driver.start()
    driver.text("one\nt")
    driver.reject_next.append(DiscordFailure(code, 404 if code == 10003 else 403))

    driver.text("wo\nthree")  # "two" is refused; "three" is still pending

    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert result.stop_reason == reason
    assert _embeds(driver) == []
    assert [s.content for s in driver.sends] == ["one", "two"]
    assert driver.closed


@pytest.mark.parametrize(
    ("code", "reason"), [(10003, "channel_deleted"), (50001, "missing_access")]
)
def test_F4_a_lost_channel_is_an_internal_stop_that_delivers_nothing_more(
    code: int, reason: StopReason
) -> None:
    # The outcome `refused` decides, whole: nothing pending is delivered, at once.
    settings = initial_state(StreamConfig()).core.settings
    failure = DiscordFailure(code, 404 if code == 10003 else 403)
    expected = Ending("stopped_by_user", "internal", stop_reason=reason, hurry=True, deliver=False)
    assert outcome.refused(settings, None, failure) == expected


@pytest.mark.parametrize(
    "failure",
    [
        DiscordFailure(50013, 403, Forbidden("Missing Permissions")),
        DiscordFailure(None, 503, ServerError("503 Service Unavailable")),
        DiscordFailure(None, 500, ServerError("500 Internal Server Error")),
    ],
    ids=["50013", "503", "500"],
)
def test_F4_other_discord_failures_end_as_error_with_an_embed(failure: DiscordFailure) -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello")
    driver.reject_next.append(failure)

    result = driver.end()

    assert result.status == "error"
    assert result.data is failure.error
    assert [e.embed.title for e in _embeds(driver)] == ["Something went wrong"]
    assert driver.messages == []


def test_F4_C6_a_refusal_while_a_stop_is_flushed_sends_nothing_more() -> None:
    """A user's stop flushes what is pending (C6); Discord refuses the first of those
    messages: the stop stays the outcome, and the rest is not sent (F4)."""
    driver = Driver(StreamConfig(delivery="messages", max_message_length=200), auto_deliver=False)
    driver.start()
    line = "a line of a hundred and twenty characters " * 3
    driver.text(*(f"{n}: {line}\n" for n in range(4)), "the end")
    stop = StopRequest("stop", "bob", context="ctx")
    driver.request(stop)
    assert driver.pending_send is not None
    sends = len(driver.sends)
    driver.reject(DiscordFailure(None, 500, RuntimeError("Internal Server Error")))

    result = driver.settle()
    assert (result.status, result.stop_reason, result.stop_context) == (
        "stopped_by_user",
        "user_request",
        "ctx",
    )
    assert len(driver.sends) == sends  # nothing after the refusal
    assert driver.messages == []


def test_F4_failure_without_an_exception_is_reported_as_the_failure() -> None:
    failure = DiscordFailure(50013, 403)
    driver = Driver()
    driver.start()
    driver.text("Hello")
    driver.reject_next.append(failure)

    result = driver.end()

    assert result.status == "error"
    assert result.data is failure


@pytest.mark.parametrize(
    ("act", "status"),
    [
        (lambda d: d.chunk(ErrorChunk(RATE_LIMITED)), "error"),
        (lambda d: d.fire_timer(), "timeout"),
        (lambda d: d.crash(RuntimeError("boom")), "error"),
    ],
    ids=["error embed", "timeout embed", "exception embed"],
)
@pytest.mark.parametrize(
    "failure",
    [DiscordFailure(50013, 403, Forbidden("Missing Permissions")), DiscordFailure(10003, 404)],
    ids=["50013", "10003"],
)
def test_F4_refused_embed_does_not_change_the_status(
    act: Callable[[Driver], object], status: StreamStatus, failure: DiscordFailure
) -> None:
    driver = Driver()
    driver.start()
    driver.reject_next.append(failure)

    act(driver)

    result = driver.settle()
    assert driver.refused == 1
    assert len(_embeds(driver)) == 1
    assert result.status == status
    assert result.stop_reason is None
    assert not isinstance(result.data, Forbidden)


# --- G: embeds the machine shows ------------------------------------------------------------------


def test_G1_error_embed_uses_the_headline_passed_with_the_chunk() -> None:
    headline = "OpenRouter is rate limiting this model right now."
    driver = Driver()
    driver.start()

    driver.chunk(ErrorChunk(RATE_LIMITED), headline=headline)

    driver.settle()
    [embed] = driver.embeds
    assert embed.description.startswith(headline)
    assert "slow down" in embed.description  # G3: the detail block follows


def test_G1_model_error_gets_the_model_configuration_title() -> None:
    driver = Driver()
    driver.start()

    driver.chunk(ErrorChunk(ProviderError("api_error", "The model `gpt-9` does not exist")))

    driver.settle()
    assert [e.title for e in driver.embeds] == ["Model Configuration Error"]


@pytest.mark.parametrize(
    ("act"),
    [
        lambda d: d.chunk(ErrorChunk(ProviderError("api_error", f"Incorrect API key {SECRET}"))),
        lambda d: d.chunk(
            ErrorChunk(ProviderError("api_error", "", original={"error": {"message": SECRET}}))
        ),
        lambda d: d.chunk(ErrorChunk(RATE_LIMITED), headline=f"Bad key {SECRET}"),
        lambda d: d.crash(RuntimeError(f"GET https://api.example/v1?key={SECRET} failed")),
        lambda d: d.chunk(
            ErrorChunk(ProviderError("unknown", "denied")), headline=f"Bearer {SECRET}"
        ),
    ],
    ids=["message", "original", "headline", "exception", "bearer headline"],
)
def test_G4_secrets_never_appear_in_an_embed(act: Callable[[Driver], object]) -> None:
    driver = Driver()
    driver.start()

    act(driver)

    driver.settle()
    assert len(driver.embeds) == 1
    for embed in driver.embeds:
        assert SECRET not in embed.title
        assert SECRET not in embed.description
        assert SECRET[:20] not in embed.description


def test_G4_secret_in_a_discord_failure_never_appears_in_the_embed() -> None:
    driver = Driver()
    driver.start()
    driver.text("Hello")
    driver.reject_next.append(DiscordFailure(None, 500, ServerError(f"proxy said {SECRET}")))

    driver.end()

    [embed] = driver.embeds
    assert SECRET not in embed.description
    assert "proxy said" in embed.description


@pytest.mark.parametrize("name", EMBED_EXITS)
def test_G7_suppressed_user_errors_send_no_embed(name: str) -> None:
    shown, _ = _run_exit(name)
    assert _embeds(shown)  # the same path shows an embed when not suppressed

    driver, _ = _run_exit(name, suppress=True)

    assert _embeds(driver) == []


@pytest.mark.parametrize("name", EMBED_EXITS)
def test_G7_suppressing_embeds_changes_no_status(name: str) -> None:
    _, shown = _run_exit(name)

    _, suppressed = _run_exit(name, suppress=True)

    assert (suppressed.status, suppressed.stop_reason) == (shown.status, shown.stop_reason)
    assert suppressed.accumulated_text == shown.accumulated_text
    assert type(suppressed.data) is type(shown.data)


def test_G7_a_suppressed_error_with_nothing_pending_ends_the_stream_at_that_moment() -> None:
    """No embed and no text to send: the error chunk is the result's moment (its duration)."""
    driver = Driver(StreamConfig(), suppress_user_errors=True)
    driver.start()
    driver.advance(2.5)
    driver.chunk(ErrorChunk(RATE_LIMITED))
    result = driver.result
    assert result is not None
    assert result.thought_log is not None
    assert (result.status, result.messages_sent) == ("error", 0)
    assert result.thought_log.generation_duration_ms == 2500
    assert _embeds(driver) == []


# -- F2, E7: surrogates are sent as Discord shows them ------------------------------------------

PAIR = "\ud83d\ude00"  # 😀 as UTF-16 code units in a str


@pytest.mark.parametrize("size", [1, 2, 3, 100])
def test_F2_a_surrogate_pair_is_sent_as_its_character_even_split_across_chunks(size: int) -> None:
    text = "smile " + PAIR + " and a lone \udc00 one\nnext line"
    driver, result = run(text, size=size)
    assert driver.messages == ["smile \U0001f600 and a lone \ufffd one", "next line"]
    sent = [e.content for e in driver.effects if isinstance(e, SendMessage)]
    assert sent == driver.messages
    assert result.messages == tuple(driver.messages)
    assert result.accumulated_text == "smile \U0001f600 and a lone \ufffd one\nnext line"


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_E7_a_message_is_never_cut_between_the_halves_of_a_pair(size: int) -> None:
    config = StreamConfig(delivery="messages", max_message_length=200, flush_limit=0)
    for before in (198, 199, 200):
        text = "a" * before + PAIR + "b" * 50
        driver, result = run(text, config=config, size=size)
        assert "\ufffd" not in result.accumulated_text  # no half became a replacement
        assert "".join(result.messages) == "a" * before + "\U0001f600" + "b" * 50
        assert result.accumulated_text == "\n".join(result.messages)
        assert all(len(m) <= 200 for m in driver.messages)


# -- B1: a chunk subclass that skipped validation -------------------------------------------------


class _Unvalidated(TextChunk):
    def __post_init__(self) -> None:
        pass


def test_B1_a_textchunk_subclass_with_bad_content_is_checked_not_trusted() -> None:
    driver = Driver(StreamConfig(delivery="messages"))
    driver.start()
    driver.text("done\n", "pending")
    driver.chunk(_Unvalidated(None))  # type: ignore[arg-type]
    result = driver.settle()
    assert result.status == "error"
    assert isinstance(result.data, TypeError)
    assert "content must be str" in str(result.data)
    assert driver.messages == ["done"]  # B13: pending not flushed


def test_B1_an_honest_subclass_is_delivered_like_its_parent() -> None:
    class Honest(TextChunk):
        pass

    driver = Driver(StreamConfig(delivery="messages"))
    driver.start()
    driver.chunk(Honest("from a subclass"))
    assert driver.end().accumulated_text == "from a subclass"


def _smuggled(chunk: object, field_name: str, value: object) -> object:
    object.__setattr__(chunk, field_name, value)  # past validation, as a broken adapter might
    return chunk


@pytest.mark.parametrize(
    "build",
    [
        lambda: _smuggled(TextChunk("x"), "content", None),
        lambda: _smuggled(TextChunk("x"), "content", b"bytes"),
        lambda: _smuggled(TextChunk("x"), "content", ["a", "list"]),
        lambda: _smuggled(TextChunk("x", thoughts=(Thought("raw", "t"),)), "thoughts", ["t"]),
        lambda: _smuggled(TextChunk("x"), "serving_provider", 5),
        lambda: _smuggled(FunctionCallChunk(CALL), "call", 7),
        lambda: _smuggled(ErrorChunk(None), "error", "boom"),
        lambda: _smuggled(DoneChunk(), "metadata", [("a", 1)]),
    ],
    ids=["content-none", "content-bytes", "content-list", "thoughts-list", "serving-int",
         "call-int", "error-str", "metadata-pairs"],
)  # fmt: skip
def test_B1_a_field_set_after_validation_is_an_error_result_not_an_exception(
    build: Callable[[], object],
) -> None:
    driver = Driver(StreamConfig(delivery="messages"))
    driver.start()
    driver.text("done\n", "pending")
    driver.chunk(build())
    result = driver.settle()
    assert result.status == "error"
    assert isinstance(result.data, TypeError)
    assert driver.messages == ["done"]  # B13: pending not flushed


# --- G5: every embed in the stream's locale ------------------------------------------------------


def _localized(driver: Driver) -> list[str]:
    """The titles of the embeds the stream sent."""
    return [e.embed.title for e in driver.of_type(SendEmbed) if isinstance(e, SendEmbed)]


@pytest.mark.parametrize(
    "ending",
    ["provider_error", "crash", "timeout", "flush_limit"],
)
def test_G5_every_embed_the_stream_composes_is_in_its_locale(ending: str) -> None:
    catalogue = DEFAULT_CATALOGUE.with_locale("pt", {k: f"PT {v}" for k, v in ENGLISH.items()})
    config = StreamConfig(delivery="messages", inactivity_timeout=5.0, flush_limit=1)
    driver = Driver(config)
    driver.state = initial_state(config, locale="pt", catalogue=catalogue)
    driver.start()
    match ending:
        case "provider_error":
            driver.chunk(ErrorChunk(ProviderError("api_error", "upstream failed")))
        case "crash":
            driver.crash(RuntimeError("boom"))
        case "timeout":
            driver.fire_timer(5.0)
        case _:
            driver.text("one\n", "two\n", "three\n")  # a second message passes flush_limit=1
    if driver.result is None:
        driver.settle()
    titles = _localized(driver)
    assert len(titles) == 1
    assert titles[0].startswith("PT "), titles


@pytest.mark.parametrize("delivery", ["messages", "live"])
def test_B1_a_state_is_plain_data_equal_histories_give_equal_states_and_effects(
    delivery: Literal["messages", "live"],
) -> None:
    # The state holds one delivery value (messages delivery's or live delivery's), compared
    # by value like the rest: two runs of the same events are equal step by step.
    config = StreamConfig(delivery=delivery, flush_limit=1)
    history: list[Event] = [
        Started(0.0),
        ChunkArrived(0.1, TextChunk("Hello\nwor")),
        ChunkArrived(0.2, TextChunk("ld")),
        Delivered(0.3, 1),
        ProviderEnded(0.4),
    ]
    first = second = initial_state(config)
    for event in history:
        first, effects = step(first, event)
        again, effects_again = step(second, event)
        assert (again, effects_again) == (first, effects)
        second = replace(again)  # a copy, not the same object
    assert first == second


def test_F3_a_limit_reached_ends_the_stream_as_its_internal_stop() -> None:
    driver = Driver(StreamConfig(delivery="messages", send_message_limit=1))
    driver.start()
    driver.text("one\ntwo\nthree")  # "one\ntwo" is packed into the first message

    result = driver.end()

    assert (result.status, result.stop_reason) == ("stopped_by_user", "send_message_limit")
    assert driver.messages == ["one\ntwo"]
