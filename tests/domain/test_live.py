"""Live delivery in the pure core (SPEC L): the layout, the cadence, the endings.

Every test drives `step` through `tests.support.live_driver.LiveDriver`, which plays the shell
and the channel and checks F2 and L8 on every result. With `auto`, turns are granted and requests
accepted at once; the cadence tests grant and deliver by hand.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cordstream.domain import (
    AwaitTurn,
    DiscordFailure,
    EditMessage,
    FunctionCall,
    FunctionCallChunk,
    SendMessage,
    StopRequest,
    StreamConfig,
    StreamResult,
    TextChunk,
    TurnGranted,
    TypingPause,
    delivery,
    initial_state,
)
from cordstream.domain import live as lives
from cordstream.domain.outbox import LimitReached
from tests.support.answers import Answer, answers, as_written, chunkings, fences_balanced
from tests.support.fuzz import examples
from tests.support.live_driver import LiveDriver, live, run_live

CURSOR = " \u258c"
_CLOSER_CHARS = '*~`)"\n'


def started(**config: object) -> LiveDriver:
    driver = LiveDriver(live(**config))
    driver.start()
    return driver


def manual(**config: object) -> LiveDriver:
    driver = LiveDriver(live(**config), auto=False)
    driver.start()
    return driver


def showing(text: str, **config: object) -> LiveDriver:
    """A driver by hand whose first message shows `text` (its turn granted, Discord's yes)."""
    driver = manual(**config)
    driver.text(text)
    driver.grant()
    driver.deliver()
    return driver


def sending(driver: LiveDriver) -> str:
    """The content of the message request in flight."""
    request = driver.in_flight
    assert isinstance(request, SendMessage | EditMessage), request
    return request.content


def awaiting(driver: LiveDriver) -> bool:
    """Whether a turn is awaited (a call, so that mypy does not narrow the attribute)."""
    return driver.turn is not None


def typing_on(driver: LiveDriver) -> bool:
    return driver.pause is not None


def without_cursor(content: str, cursor: str = CURSOR) -> str:
    if content.endswith(cursor):
        return content[: -len(cursor)]
    if content.endswith("\n" + cursor.strip()):
        return content[: -len(cursor.strip()) - 1]
    return content


def assert_grows(history: list[str]) -> None:
    """L3: each content, cursor and provisional closers taken off, starts the next one."""
    for before, after in itertools.pairwise(history):
        shown = without_cursor(before)
        following = without_cursor(after)
        # The longest prefix of `shown` that `following` starts with; what is left over may
        # only be provisional closers (an open fence's closing line, inline markers).
        common = 0
        for a, b in zip(shown, following, strict=False):
            if a != b:
                break
            common += 1
        rest = shown[common:]
        assert all(char in _CLOSER_CHARS for char in rest), (before, after)


# -- L1 -----------------------------------------------------------------------------------------


def test_L1_the_first_characters_create_the_first_message_as_a_reply() -> None:
    driver = manual()
    driver.text("Hel")
    assert awaiting(driver)
    driver.grant()
    request = driver.in_flight
    assert isinstance(request, SendMessage)
    assert request == SendMessage(request.seq, "Hel" + CURSOR, reply=True, streaming=True)
    driver.deliver()
    driver.text("lo")
    driver.grant()
    assert type(driver.requests[-1]) is EditMessage
    assert sending(driver) == "Hello" + CURSOR


def test_L1_typing_shows_until_the_first_message_and_is_renewed_while_the_model_thinks() -> None:
    driver = manual()
    assert isinstance(driver.pause, TypingPause)
    driver.end_pause()  # the model still thinks: renewed
    assert typing_on(driver)
    assert driver.typing_shown == 2
    driver.text("Hi")
    driver.grant()
    driver.deliver()
    driver.end_pause()  # a message exists now: no more typing
    assert not typing_on(driver)
    assert driver.typing_shown == 2


def test_L1_nothing_is_shown_for_whitespace_alone() -> None:
    driver = manual()
    driver.text("\n\n  ")
    assert not awaiting(driver)


# -- L2 -----------------------------------------------------------------------------------------


def test_L2_one_request_at_a_time_each_carrying_the_latest_text() -> None:
    driver = manual()
    driver.text("One")
    assert isinstance(driver.turn, AwaitTurn)
    driver.text(" two")  # the turn is not there yet: the request will carry this too
    driver.grant()
    assert sending(driver) == "One two" + CURSOR
    driver.text(" three")
    driver.text(" four")
    assert not awaiting(driver)  # a request is in flight: no second one
    driver.deliver()
    assert awaiting(driver)
    driver.text(" five")
    driver.grant()
    assert sending(driver) == "One two three four five" + CURSOR


def test_L2_a_turn_while_the_model_writes_is_spaced_and_names_its_route() -> None:
    driver = manual()
    driver.text("One")
    assert driver.turn == AwaitTurn(driver.turn.token if driver.turn else 0, False, "send")
    driver.grant()
    driver.deliver()
    driver.text(" two")
    assert driver.turn is not None
    assert (driver.turn.prompt, driver.turn.route) == (False, "edit")


def test_L2_a_spaced_turn_awaited_when_the_model_ends_is_asked_for_again_prompt() -> None:
    driver = showing("One")
    driver.text(" two")
    spaced = driver.turn
    assert spaced is not None
    assert not spaced.prompt
    driver.feed_end()
    again = driver.turn
    assert again is not None
    assert again != spaced
    assert (again.prompt, again.route) == (True, "edit")
    assert driver.feed(TurnGranted(driver.now, spaced.token)) == ()  # the old turn is stale
    driver.grant()
    assert sending(driver) == "One two"
    driver.deliver()
    assert driver.settle().anomalies == ()


def test_L2_a_prompt_turn_awaited_when_the_model_ends_is_not_asked_for_again() -> None:
    driver = manual(max_message_length=200)
    driver.text("word " * 39 + "yy" * 5)  # the first message is finished at once
    turn = driver.turn
    assert turn is not None
    assert turn.prompt
    driver.feed_end()
    assert driver.turn is turn


def test_L2_a_finished_messages_final_edit_is_prompt_and_the_next_message_spaced() -> None:
    driver = manual(max_message_length=200)
    driver.text("word " * 30)
    driver.grant()
    driver.deliver()
    driver.text("x" * 60)  # does not fit: the message is finished where it is
    turns = []
    while driver.turn is not None:
        turns.append((driver.turn.prompt, driver.turn.route))
        driver.grant()
        driver.deliver()
    assert turns == [(True, "edit"), (False, "send")]


def test_L2_a_request_whose_route_changed_since_its_turn_asks_for_a_turn_of_its_own() -> None:
    # The turn was asked for the next message (a create) while the open one waited for its
    # final edit; by the time it came, the text made the final edit go first: an edit, in
    # another of Discord's buckets (L2). It asks again rather than go uncounted there.
    driver = manual(max_message_length=200)
    steps = [
        "xxsupercalifragilistic ", "longish\n", "ok. ", "word\nlongish word",
        "supercalifragilistic", "ok.xx", "ok. a ", "ok.\nword\n",
        "ok.ok.longishsupercalifragilistic a ", "a longish ok.longish aa\n",
        "\n\nxx xx\n\n\nword",
    ]  # fmt: skip
    for text in steps:
        driver.text(text)
        driver.grant()
        driver.deliver()
    driver.text("longishok")
    asked = driver.turn
    assert asked is not None
    assert asked.route == "send"
    driver.text(".\nlongish ")
    driver.grant()
    nothing = driver.in_flight
    assert nothing is None
    again = driver.turn
    assert again is not None
    assert (again.route, again.prompt) == ("edit", True)
    driver.grant()
    request = driver.in_flight
    assert isinstance(request, EditMessage)
    assert not request.streaming
    driver.deliver()
    assert driver.end().anomalies == ()


def test_L2_no_turn_is_asked_when_there_is_nothing_new() -> None:
    driver = manual()
    driver.text("Done here.")
    driver.grant()
    driver.deliver()
    assert not awaiting(driver)
    assert driver.in_flight is None
    driver.text("   ")  # nothing a user would see
    assert not awaiting(driver)


def test_L2_the_fast_path_only_grows_the_tail_while_a_turn_is_awaited() -> None:
    driver = manual()
    driver.text("a")
    before = driver.state
    driver.text("b", "c", "d")
    assert driver.state.core is before.core  # no effect, no new core: the hot path (E10)
    assert driver.state.delivery is before.delivery
    assert driver.state.tail == "abcd"


# -- L3, L4 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "provisional", "rest", "final"),
    [
        pytest.param(
            "Some **bold te",
            "Some **bold te**" + CURSOR,
            "xt** done",
            "Some **bold text** done",
            id="inline markers",
        ),
        pytest.param(  # the cursor after the closing fence, on a line of its own
            "```py\nx = 1\n",
            "```py\nx = 1\n```\n\u258c",
            "y = 2\n```\nAfter.",
            "```py\nx = 1\ny = 2\n```\nAfter.",
            id="code block",
        ),
    ],
)
def test_L4_open_markup_is_closed_provisionally_and_the_final_edit_drops_the_cursor(
    first: str, provisional: str, rest: str, final: str
) -> None:
    driver = manual()
    driver.text(first)
    driver.grant()
    assert sending(driver) == provisional
    driver.deliver()
    driver.text(rest)
    driver.feed_end()
    driver.settle()
    assert driver.channel == [final]


def test_L4_a_fence_line_still_arriving_is_not_shown() -> None:
    driver = manual()
    driver.text("Look:\n```pyth")
    driver.grant()
    assert sending(driver) == "Look:" + CURSOR


def test_L4_the_cursor_is_configurable_and_may_be_none() -> None:
    driver, result = run_live("Plain answer.", cursor="")
    assert all(
        request.content == "Plain answer."[: len(request.content)] for request in driver.edits
    )
    assert result.messages == ("Plain answer.",)


@pytest.mark.parametrize(
    "ending",
    ["completed", "stop", "follow_up", "timeout", "crash", "function_call"],
)
def test_L4_L7_every_way_out_makes_a_final_edit_without_the_cursor(ending: str) -> None:
    driver = manual()
    driver.text("Shown text")
    driver.grant()
    driver.deliver()
    driver.text(" and more")
    match ending:
        case "completed":
            driver.feed_end()
        case "stop":
            driver.request(StopRequest("stop", "u1"))
        case "follow_up":
            driver.request(StopRequest("follow_up", "u1"))
        case "timeout":
            driver.fire_timer()
        case "crash":
            driver.feed_crash(RuntimeError("boom"))
        case "function_call":
            driver.chunk(FunctionCallChunk(FunctionCall("f")))
    result = driver.settle()
    assert not any(CURSOR.strip() in content for content in driver.channel)
    dropped = ending in {"follow_up", "crash"}
    assert driver.channel[0] == ("Shown text" if dropped else "Shown text and more")
    assert result.messages[0] == driver.channel[0]


def test_L4_a_request_says_whether_its_message_stays_open() -> None:
    """`streaming` (what a Stop button rides on, K2) is True exactly while the cursor shows."""
    line = "word " * 7 + "word\n"
    driver, result = run_live(line * 30, size=7, max_message_length=400)
    assert len(result.messages) > 2
    requests = [r for r in driver.requests if isinstance(r, SendMessage | EditMessage)]
    last: dict[int, SendMessage | EditMessage] = {}
    created = 0
    for request in requests:
        index = request.message if isinstance(request, EditMessage) else created
        created += isinstance(request, SendMessage)
        # Open: the cursor shows; finished: the final edit, without it.
        assert request.streaming == request.content.endswith(CURSOR), request
        last[index] = request
    assert sorted(last) == list(range(len(result.messages)))
    assert not any(request.streaming for request in last.values())
    assert any(request.streaming for request in requests)


# -- L5 -----------------------------------------------------------------------------------------


def test_L5_a_long_answer_rolls_over_at_line_ends() -> None:
    line = "word " * 7 + "word\n"  # 40 characters: a line end near every message end
    _driver, result = run_live(line * 40, size=7, max_message_length=400)
    assert len(result.messages) > 3
    for message in result.messages:
        assert len(message) <= 400
        assert message == message.strip()
        assert message.endswith("word")
    assert "\n".join(result.messages) == (line * 40).strip()


@pytest.mark.parametrize("before", [165, 166])
def test_L5_near_the_end_a_message_shows_up_to_the_last_space(before: int) -> None:
    """Within the last eighth of a message, no line end: the word still arriving waits."""
    driver = manual(max_message_length=200)
    driver.text("a" * before + " bbb")
    driver.grant()
    assert sending(driver) == "a" * before + CURSOR


def test_L4_E8_markers_the_answer_leaves_open_are_closed_by_the_final_edit() -> None:
    _driver, result = run_live("Some **bold text", size=4)
    assert result.messages == ("Some **bold text**",)


def test_L5_a_paragraph_without_line_ends_rolls_over_between_words() -> None:
    text = "alpha beta gamma delta " * 60
    _driver, result = run_live(text, size=5, max_message_length=300)
    assert len(result.messages) > 3
    assert " ".join(result.messages) == text.strip()


def test_L5_a_word_longer_than_a_message_is_cut_between_graphemes() -> None:
    text = "e\u0301" * 400  # one word of 400 clusters, 800 code points
    _driver, result = run_live(text, size=7, max_message_length=200)
    assert "".join(result.messages) == text
    for message in result.messages:
        assert not message.startswith("\u0301")  # no cluster cut in two


def test_L5_a_long_code_block_is_split_between_lines_and_reopened_with_its_language() -> None:
    code = "".join(f"print({i})  # line {i}\n" for i in range(40))
    text = "Intro.\n```python\n" + code + "```\nAfter."
    _driver, result = run_live(text, size=9, max_message_length=300)
    assert len(result.messages) > 2
    for message in result.messages:
        assert fences_balanced(message), message
    for message in result.messages[1:-1]:
        assert message.startswith("```python\n")
        assert message.endswith("\n```")
    as_written(result.messages, text, closers=True, fences=True)


def test_L5_a_code_block_starting_near_the_end_is_held_back_and_starts_the_next_message() -> None:
    prose = "word " * 50  # 250 of a 300-character message: little room left
    block = "```js\n" + "let x = 1;\n" * 6 + "```"
    driver = manual(max_message_length=300)
    driver.text(prose + "\n")
    driver.grant()
    driver.deliver()
    driver.text(block[:20])
    for piece in (block[20:], "\nTail."):
        driver.text(piece)
        while driver.turn is not None:
            driver.grant()
            if driver.in_flight is not None:
                driver.deliver()
    driver.feed_end()
    result = driver.settle()
    assert result.messages[0] == prose.strip()
    assert result.messages[1].startswith("```js\n")
    for history in driver.history:
        assert_grows(history)
        for content in history:
            assert "```js" not in content or content.startswith("```js")


# -- L6 -----------------------------------------------------------------------------------------


def test_L6_think_text_is_never_shown_and_a_partial_tag_waits() -> None:
    driver = manual()
    driver.text("Answer <thi")
    driver.grant()
    assert sending(driver) == "Answer" + CURSOR  # "<thi" may become a tag
    driver.deliver()
    driver.text("nk>secret plan</think> visible")
    driver.feed_end()
    result = driver.settle()
    assert result.messages == ("Answer  visible",)
    assert all("secret" not in request.content for request in driver.edits + driver.creates)
    assert result.thought_log is not None
    assert result.thought_log.raw == "secret plan"


def test_L6_a_stray_closing_think_tag_takes_back_only_what_was_not_shown() -> None:
    driver = showing("Shown")
    driver.text(" reasoning</think>Answer.")
    driver.feed_end()
    result = driver.settle()
    assert result.messages == ("ShownAnswer.",)


# -- L7 -----------------------------------------------------------------------------------------


def test_L7_a_stop_flushes_everything_received_into_the_final_edits() -> None:
    driver = manual(max_message_length=200)
    driver.text("x")
    driver.grant()
    driver.deliver()
    driver.text("lots of words " * 40)
    driver.request(StopRequest("stop", "u1"))
    result = driver.settle()
    assert result.status == "stopped_by_user"
    assert " ".join(result.messages).replace("  ", " ").startswith("xlots of words")
    assert len(" ".join(result.messages)) >= len("x" + "lots of words " * 40) - 5


def test_L7_the_embed_is_a_message_of_its_own_after_the_text() -> None:
    driver = manual()
    driver.text("Partial")
    driver.grant()
    driver.deliver()
    driver.fire_timer()
    result = driver.settle()
    assert result.status == "timeout"
    assert driver.channel == ["Partial"]
    assert len(driver.embeds) == 1


# -- L8 -----------------------------------------------------------------------------------------


def test_L8_messages_sent_counts_messages_created_not_edits() -> None:
    driver, result = run_live("One two three four five six seven.", size=2)
    assert len(driver.edits) > 5
    assert result.messages_sent == 1 == len(driver.creates)


def test_L8_flush_limit_counts_created_messages_and_the_last_one_gets_its_final_edit() -> None:
    driver, result = run_live(
        "many words here " * 100, size=11, max_message_length=200, flush_limit=3
    )
    assert result.status == "stopped_by_user"
    assert result.stop_reason == "flush_limit"
    assert result.messages_sent == 3
    assert len(driver.creates) == 3
    assert not any(content.endswith(CURSOR) for content in driver.channel)
    assert len(driver.embeds) == 1


def test_L8_send_message_limit_counts_created_messages() -> None:
    driver, result = run_live(
        "many words here " * 100, size=11, max_message_length=200, send_message_limit=2
    )
    assert result.stop_reason == "send_message_limit"
    assert result.messages_sent == 2
    assert driver.embeds == []


# -- L9 -----------------------------------------------------------------------------------------


def refused_edit(code: int) -> tuple[LiveDriver, StreamResult]:
    """A stream whose first message exists and whose next edit Discord refuses with `code`."""
    driver = manual()
    driver.text("First words")
    driver.grant()
    driver.deliver()
    driver.text(" more")
    driver.grant()
    driver.reject(DiscordFailure(code, 404))
    return driver, driver.settle()


def test_L9_a_deleted_live_message_ends_the_stream_quietly() -> None:
    driver, result = refused_edit(10008)
    assert result.status == "stopped_by_user"
    assert result.stop_reason == "message_deleted"
    assert result.messages == ()
    assert result.messages_sent == 0
    assert driver.closed
    assert driver.embeds == []
    assert str(getattr(driver.requests[-1], "content", "")).startswith("First")


def test_L9_only_the_deleted_message_leaves_the_result() -> None:
    driver = started(max_message_length=200)
    driver.text("word " * 45 + "\n", "second message text " * 3)
    assert len(driver.channel) == 2
    driver.auto = False
    driver.text(" and on")
    driver.grant()
    driver.reject(DiscordFailure(10008, 404))
    result = driver.settle()
    assert result.stop_reason == "message_deleted"
    assert result.messages == (driver.channel[0],)
    assert result.messages_sent == 1


def test_L9_other_refusals_end_as_before() -> None:
    _driver, result = refused_edit(10003)
    assert result.stop_reason == "channel_deleted"
    assert result.messages == ("First words" + CURSOR,)  # what the channel last accepted


@pytest.mark.parametrize(
    "failure",
    [DiscordFailure(50013, 403), DiscordFailure(None, 500), DiscordFailure(10003, 404)],
    ids=["50013", "no code", "10003"],
)
def test_F4_G_a_refused_embed_changes_no_outcome_under_live_delivery(
    failure: DiscordFailure,
) -> None:
    # The timeout's embed is the only request (nothing was written): Discord refuses it, and
    # the stream still ends as a timeout (G is best effort), with nothing in the channel.
    driver = LiveDriver(live())
    driver.start()
    driver.reject_next.append(failure)
    driver.fire_timer()
    result = driver.settle()
    assert driver.refused == 1
    assert [type(r).__name__ for r in driver.requests] == ["SendEmbed"]
    assert (result.status, result.stop_reason, result.messages) == ("timeout", None, ())


# -- L11 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("degree", [0, 2, 3])
def test_L11_the_humanizer_has_no_effect_on_live_delivery(degree: int) -> None:
    text = "One. Two! Three?\nFour five.\n" * 5
    plain, plain_result = run_live(text, size=4)
    driver, result = run_live(text, size=4, humanizer_degree=degree)
    assert driver.requests == plain.requests
    assert result.messages == plain_result.messages


# -- properties ---------------------------------------------------------------------------------

_SETTINGS = settings(
    max_examples=examples(200), suppress_health_check=[HealthCheck.too_slow], deadline=None
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Answer, list[str], int, bool]:
    answer = draw(answers())
    return (
        answer,
        draw(chunkings(answer.markup)),
        draw(st.sampled_from((200, 333, 1000, 1950))),
        draw(st.booleans()),
    )


@_SETTINGS
@given(cases())
def test_L3_L4_L5_for_any_chunking_and_timing_the_channel_shows_the_answer(
    case: tuple[Answer, list[str], int, bool],
) -> None:
    answer, chunks, max_len, slow = case
    driver = LiveDriver(live(max_message_length=max_len, flush_limit=0), auto=not slow)
    driver.start()
    for index, chunk in enumerate(chunks):
        driver.text(chunk)
        if slow and index % 3 == 0:  # Discord answers now and then, not after every chunk
            if driver.in_flight is not None:
                driver.deliver()
            if driver.turn is not None:
                driver.grant()
    result = driver.end()
    for history in driver.history:
        assert_grows(history)
        for content in history:
            assert len(content) <= max_len
    for message in result.messages:
        assert fences_balanced(message), message
        assert not message.endswith(CURSOR)
    as_written(result.messages, answer.visible, closers=True, fences=True)


def test_L10_a_request_costs_the_length_of_a_message_not_of_the_answer() -> None:
    # Discord slow to answer: the text piles up; each request still carries one message.
    driver = manual(max_message_length=500)
    for _ in range(200):
        driver.text("pile of text ")
    for _ in range(40):
        if driver.turn is not None:
            driver.grant()
        if driver.in_flight is not None:
            driver.deliver()
    assert all(len(request.content) <= 500 for request in driver.creates + driver.edits)
    assert len(driver.state.tail) <= 500 + len("pile of text ")


def test_live_config_validation() -> None:
    with pytest.raises(ValueError, match="cursor"):
        StreamConfig(delivery="live", cursor="abc")
    with pytest.raises(ValueError, match="delivery"):
        StreamConfig(delivery="stream")  # type: ignore[arg-type]
    assert lives.EMPTY.created == 0
    assert re.fullmatch(r"\W+", CURSOR.strip())
    assert TextChunk("x").content == "x"


def test_L10_text_that_piles_up_past_the_bound_waits_outside_the_tail_and_all_arrives() -> None:
    # The model writes far faster than Discord's budget lets it show: past TAIL_BOUND the
    # text waits in a pile that costs nothing per chunk, and is joined once per decision.
    driver = manual(max_message_length=2000, flush_limit=0)
    driver.text("start ")
    words = "piling words " * 4000  # 52,000 characters while the first turn is awaited
    for index in range(0, len(words), 13):
        driver.text(words[index : index + 13])
        assert len(driver.state.tail) <= lives.TAIL_BOUND
    live_state = driver.state.live
    assert live_state is not None
    assert live_state.pile is not None
    result = driver.end()
    assert result.status == "completed"
    assert " ".join(result.messages).split() == ("start " + words).split()


def test_E6_L4_a_long_run_of_whitespace_is_never_a_message_of_its_own() -> None:
    # Blanks before the first word: a message never starts with them (Discord trims them)
    # and is never made of them alone (Discord refuses an empty message).
    driver = manual(max_message_length=200)
    driver.text(" " * 190 + "word")
    driver.grant()
    assert sending(driver) == "word" + CURSOR
    assert driver.end().messages == ("word",)


def test_E3_L5_an_opening_line_longer_than_a_message_is_its_fence_and_language_word() -> None:
    """Found by the shell's state machine: a fence line whose info string is longer than a
    message was cut and shown alone, an open block with no closing fence. The info string is
    markup Markdown does not show: the block opens with its fence and language word."""
    driver = started(max_message_length=200, humanizer_degree=0)
    driver.text("```", "@everyone " * 20, "A whole line.\n", "Hello ")
    assert driver.end().messages == ("```@everyone\nHello \n```",)
    for history in driver.history:
        assert all(fences_balanced(without_cursor(c)) for c in history), history


def test_E3_L5_a_block_whose_opening_line_does_not_fit_starts_the_next_message() -> None:
    """After text the message shows, the block's opening line, longer than the room left, is
    not cut: the block starts the next message, its line shortened there."""
    info = "python " + "word " * 60
    driver = started(max_message_length=200)
    driver.text("Intro text.\n", "```" + info + "\nx = 1\n", "```\n", "After\n")
    result = driver.end()
    assert result.messages == ("Intro text.", "```python\nx = 1\n```\nAfter")
    for history in driver.history:
        assert all(fences_balanced(without_cursor(c)) for c in history), history


def test_E3_L5_a_cut_prose_line_that_starts_like_a_fence_is_closed_where_it_is_cut() -> None:
    """Found by the shell's state machine: a line of backticks and 500 characters is prose
    (a backtick later on it), but its start, cut off, reads as an opening fence line: the
    message that ends there closes it."""
    driver = started(max_message_length=200, humanizer_degree=0)
    driver.text("```", "y" * 500, "```python\n")
    result = driver.end()
    assert len(result.messages) == 3
    assert result.messages[0] == "```" + "y" * 179 + "\n```"
    assert all(fences_balanced(message) for message in result.messages), result.messages
    assert "".join(result.messages).replace("\n```", "", 1) == "```" + "y" * 500 + "```python"


def test_E3_L5_blanks_after_a_fence_shorten_with_its_line() -> None:
    driver = started(max_message_length=200)
    driver.text("```python" + " " * 250 + "\nx = 1\n```\n")
    assert driver.end().messages == ("```python\nx = 1\n```",)


def test_L5_a_block_that_closed_near_the_end_stays_with_the_message_that_fits_it() -> None:
    """A long closing fence line (33 backticks, past `_EARLY`) ends near the message's end:
    the line end before it would roll the message over there, but the block has closed and
    fits, so the message ends after its closing fence rather than before its opening one."""
    prose = ("word " * 400)[:1740] + "\n"
    closing = "`" * 33
    driver = started(max_message_length=2000)
    for piece in (prose, "```\ncode\n", closing + "\n", "More text\n"):
        driver.text(piece)
    result = driver.end()
    assert list(result.messages) == [prose + "```\ncode\n" + closing, "More text"]


def test_L5_a_block_that_ends_exactly_at_the_room_stays_in_the_message() -> None:
    """A closed block whose closing fence line ends exactly where the message's room does
    (182 of 200 characters) fits it: the message ends after the block, not before it."""
    prose = ("word " * 60)[:162] + "\n"
    block = "```\n" + "c" * 10 + "\n```"
    driver = started(max_message_length=200)
    driver.text(prose + block + "\nAfter the block comes more text here.\n")
    result = driver.end()
    assert list(result.messages) == [prose + block, "After the block comes more text here."]


def test_L5_near_a_messages_end_blanks_before_a_word_still_arriving_show_nothing() -> None:
    driver = manual(max_message_length=200)
    driver.text(" " * 160 + "wo")  # near the end only up to a boundary: blanks alone
    assert not awaiting(driver)
    assert driver.end().messages == ("wo",)


def test_C6_L7_a_follow_up_before_anything_was_shown_ends_at_once() -> None:
    # A turn is awaited for text no message shows yet; the follow-up drops that text, so
    # nothing is left to send and the result comes without waiting for the turn.
    driver = manual()
    driver.text("Not shown yet")
    assert awaiting(driver)
    driver.request(StopRequest("follow_up", "u2"))
    assert driver.result is not None
    assert driver.result.status == "follow_up_interrupt"
    assert driver.channel == []


def test_E3_L3_backticks_at_a_line_start_wait_until_they_are_known_not_to_be_a_fence() -> None:
    # Found by the property test: "`" was shown, then became "```" with nothing after it, a
    # bare fence line the final edit leaves out (E3) while L3 keeps what was shown.
    driver = manual()
    driver.text("<reasoning>stream stream\n</reasoning>`")
    assert not awaiting(driver)  # "`" may become a fence line: not shown yet
    driver.text("``\n")
    assert driver.end().messages == ()  # a bare fence line: nothing to show, as E3 says
    plain = manual()
    plain.text("A tick: \n``")
    assert plain.end().messages == ("A tick: \n``",)  # at the end, backticks are text


def test_L2_L5_a_finished_message_showing_nothing_new_lets_the_next_one_go_first() -> None:
    # A paragraph ends near the message's end; a code block then outgrows the room left. The
    # message already shows all it will keep, so the next one is created first (new text in
    # this turn) and the finished one gets its final edit in the next (L2, L5).
    driver = manual()
    prose = ("alpha beta gamma delta " * 80)[:1689].rstrip() + "\n"
    driver.text(prose + "```python\nprint(0)\n")
    driver.grant()
    driver.deliver()
    assert driver.channel == [prose.strip() + CURSOR]  # the block is held back
    driver.text("".join(f"print({i})  # code line {i}\n" for i in range(1, 40)))
    driver.grant()
    create = driver.in_flight
    assert isinstance(create, SendMessage)
    assert create.content.startswith("```python\nprint(0)")
    driver.deliver()
    driver.grant()
    close = driver.in_flight
    assert isinstance(close, EditMessage)
    assert (close.message, close.content) == (0, prose.strip())
    result = driver.end()
    assert result.messages[0] == prose.strip()
    assert result.messages[1].startswith("```python\n")


def _live_state(driver: LiveDriver) -> lives.Live:
    state = driver.state.delivery
    assert isinstance(state, lives.Live)
    return state


def test_E10_L10_the_live_state_says_when_a_chunk_may_just_grow_the_tail() -> None:
    # The hot path asks live delivery's state itself (no segmenter stands in for it): before
    # the first turn is asked for a chunk must be looked at; while a turn is awaited it only
    # grows the tail; while a capture is open, or once the stream ends, never.
    driver = manual(flush_limit=0)
    assert _live_state(driver).try_append("", "Hello") is None  # the reducer looks
    driver.text("Hello")
    assert awaiting(driver)
    state = _live_state(driver)
    assert state.appending
    assert state.try_append("Hello", " world") == "Hello world"
    tail = driver.state.tail
    driver.text(" world")
    assert driver.state.tail == tail + " world"
    assert _live_state(driver) is state  # the hot path built no new delivery value
    driver.text("<think>")
    assert not _live_state(driver).appending
    driver.text("x</think> more")
    assert _live_state(driver).appending
    result = driver.end()
    assert result.messages == ("Hello world more",)
    assert _live_state(driver).try_append("", "late") is None


def test_L_the_state_holds_one_delivery_value_live_or_messages() -> None:
    live_state = initial_state(StreamConfig(delivery="live"))
    assert live_state.delivery == lives.EMPTY
    assert live_state.live is live_state.delivery
    messages_state = initial_state(StreamConfig(delivery="messages"))
    assert isinstance(messages_state.delivery, delivery.Messages)
    assert messages_state.live is None


def test_F3_L8_a_limit_on_creates_is_a_named_value() -> None:
    # One message was created and finished; the next create would pass the limit.
    config = StreamConfig(delivery="live", flush_limit=1)
    live = replace(lives.EMPTY, sealed=(None, "one"), created=1, turn=3, next_seq=4)
    after, tail, limit = lives.granted(live, "two", config, ending=False, embed=None)
    assert limit == LimitReached("flush_limit")
    assert (after.in_flight, tail) == (None, "two")  # nothing was sent


def test_E3_L5_a_block_is_not_cut_before_its_closing_fence_alone() -> None:
    # The room runs out right before the block's closing fence: cut there, the next message
    # would be an empty block. The block fits whole (179 of 200 characters), so it goes whole.
    body = "".join("y" * 9 + "\n" for _ in range(17)) + "z\n"
    block = "```\n" + body + "```"
    _, result = run_live(block, size=len(block), max_message_length=200)
    assert result.messages == (block,)
