"""Example tests for think and details capture, one SPEC rule behaviour each (E2, E4, E5, E8).

Scanner tests call `cordstream.domain.capture.feed` directly; stream tests play the shell with
`tests.support.driver` and look at what reached the channel (`driver.messages`) and what the result
captured (`thought_log.raw`, `thought_log.summary`, `details_content`).
"""

from __future__ import annotations

import pytest

from cordstream.domain import (
    FunctionCall,
    FunctionCallChunk,
    StreamConfig,
    TextChunk,
    Thought,
    capture,
)
from tests.support.driver import Driver, run


def started() -> Driver:
    driver = Driver(StreamConfig(delivery="messages"))
    driver.start()
    return driver


def splits(text: str) -> list[list[str]]:
    """`text` cut into two and into three chunks, at every position and pair of positions."""
    cuts: list[list[str]] = []
    for i in range(1, len(text)):
        cuts.append([text[:i], text[i:]])
        cuts.extend([text[:i], text[i:j], text[j:]] for j in range(i + 1, len(text)))
    return cuts


# -- E2: a partial tag is held, and only while it can still become one -----------------------


@pytest.mark.parametrize(
    "partial", ["<", "<thi", "<THINK", "</thin", "<x:th", "<reasoning", "<det", "<details cla"]
)
def test_E2_a_partial_tag_is_held(partial: str) -> None:
    state, ops = capture.feed(capture.IDLE, "Answer: " + partial)
    assert ops == [("visible", "Answer: ")]
    assert state.pending == partial


def test_E2_a_held_partial_tag_completes_with_the_next_chunk() -> None:
    state, ops = capture.feed(capture.IDLE, "Answer: <thi")
    assert ops == [("visible", "Answer: ")]
    state, ops = capture.feed(state, "nk>plan</think>yes")
    assert ops == [("think_open", ""), ("think", "plan"), ("visible", "yes")]
    assert state is capture.IDLE


@pytest.mark.parametrize("text", ["x < y", "I <3 it", "a <b>bold</b>", "<summary>"])
def test_E2_a_less_than_sign_that_cannot_become_a_tag_is_not_held(text: str) -> None:
    state, ops = capture.feed(capture.IDLE, text)
    assert ops == [("visible", text)]
    assert state is capture.IDLE


def test_E2_a_partial_tag_is_held_at_most_max_pending_characters() -> None:
    text = "I <think " + "a" * capture.MAX_PENDING
    state, ops = capture.feed(capture.IDLE, text)
    assert ops == [("visible", text)]
    assert state.pending == ""


def test_E2_a_partial_think_tag_never_reaches_the_channel() -> None:
    driver = started()
    driver.text("Hello\n<thi")
    assert driver.sends == []
    driver.text("nk>secret</think>World\n")
    assert driver.messages == ["Hello"]
    driver.end()
    assert driver.messages == ["Hello", "World"]


# -- E4: think blocks ------------------------------------------------------------------------

_THINK_TAGS = {
    "think": ("<think>", "</think>"),
    "thinking": ("<thinking>", "</thinking>"),
    "reasoning": ("<reasoning>", "</reasoning>"),
    "namespaced": ("<x:think>", "</x:think>"),
    "mixed-case": ("<ThInK>", "</tHiNk>"),
    "attributes": ('<think id="1">', "</think>"),
}


@pytest.mark.parametrize(("opener", "closer"), list(_THINK_TAGS.values()), ids=list(_THINK_TAGS))
def test_E4_a_think_block_is_removed_and_captured(opener: str, closer: str) -> None:
    driver, result = run(f"Before\n{opener}secret\nplan{closer}\nAfter\n")
    assert driver.messages == ["Before", "After"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "secret\nplan"


@pytest.mark.parametrize(("opener", "closer"), list(_THINK_TAGS.values()), ids=list(_THINK_TAGS))
def test_E4_a_think_block_split_across_chunks_at_every_position_is_captured(
    opener: str, closer: str
) -> None:
    text = f"Before\n{opener}secret\nplan{closer}\nAfter\n"
    for chunks in splits(text):
        driver, result = run(chunks)
        assert driver.messages == ["Before", "After"], chunks
        assert result.thought_log is not None
        assert result.thought_log.raw == "secret\nplan", chunks


def test_E4_several_think_blocks_are_joined_by_a_blank_line() -> None:
    driver, result = run("<think>one</think>A\n<think>two</think>B\n")
    assert driver.messages == ["A", "B"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "one\n\ntwo"


def test_E4_a_stray_closing_tag_captures_the_unsent_text_before_it() -> None:
    driver = started()
    driver.text("Visible line\nmore")
    assert driver.messages == ["Visible line"]  # already accepted by Discord
    driver.text(" unsent</think>Answer\n")
    result = driver.end()
    assert driver.messages == ["Visible line", "Answer"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "more unsent"
    assert result.accumulated_text == "Visible line\nAnswer"  # sent text cannot be taken back


@pytest.mark.parametrize("size", [1, 3, 100])
@pytest.mark.parametrize(
    "before", [":)\n```\n```\n", "...\n```py\nx = 1\n```\n", "Hi\n!!\n```\ncode\n```\n"]
)
def test_E4_E6_a_stray_closing_tag_captures_punctuation_that_led_a_code_block(
    before: str, size: int
) -> None:
    # Punctuation alone before a fence goes with the block (E6): it is the model's text all
    # the same, and a stray closing tag captures it with the block, in order. (Degree 0
    # sends nothing before the end, so all of it is still unsent when the tag comes.)
    config = StreamConfig(delivery="messages", humanizer_degree=0)
    driver, result = run(before + "more</think>Answer\n", config=config, size=size)
    assert driver.messages == ["Answer"]
    assert result.thought_log is not None
    raw = result.thought_log.raw
    assert raw is not None
    assert raw.startswith(before.rstrip("\n")), raw
    assert raw.endswith("more"), raw


def test_E4_a_stray_closing_tag_before_anything_was_sent_captures_everything() -> None:
    driver, result = run("reasoning here\nand here</think>Answer\n", size=100)
    assert driver.messages == ["Answer"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "reasoning here\nand here"


@pytest.mark.parametrize("size", [1, 2, 3, 100])
@pytest.mark.parametrize(
    ("text", "raw"),
    [
        ("<think>a</think>b</think>c", "a\n\nb"),  # the example
        ("<think>a</think>\nb\n</think>c", "a\n\nb"),
        ("<THINK>a</THINK>b</think>c", "a\n\nb"),
        ("<think>a</think>...\n</think>c", "a\n\n..."),  # punctuation waiting (E6) is unsent
    ],
)
def test_E4_a_stray_closing_tag_after_earlier_reasoning(text: str, raw: str, size: int) -> None:
    """What came after the first block and before the stray tag was reasoning too: it joins the
    raw log as a block of its own (a blank line between), and only what follows is sent."""
    driver, result = run(text, size=size)
    assert driver.messages == ["c"]
    assert result.thought_log is not None
    assert result.thought_log.raw == raw


def test_E4_provider_thoughts_go_to_the_summary_and_raw_logs() -> None:
    driver = started()
    driver.chunk(TextChunk("Hi\n", thoughts=(Thought("summary", "S1"), Thought("raw", "R1"))))
    driver.chunk(TextChunk("there", thoughts=(Thought("summary", "S2"),)))
    result = driver.end()
    assert driver.messages == ["Hi", "there"]
    assert result.thought_log is not None
    assert result.thought_log.summary == "S1S2"
    assert result.thought_log.raw == "R1"


@pytest.mark.parametrize(
    "chunks",
    [
        ["```html\n<think>x</think>\n```\n"],
        ["```html\n", "<think>x</think>\n", "```\n"],
        ["```html\n<thi", "nk>x</think>\n```\n"],
    ],
    ids=["one-chunk", "line-chunks", "tag-split"],
)
def test_E4_a_think_tag_inside_a_fenced_code_block_stays_visible(chunks: list[str]) -> None:
    driver, result = run(chunks)
    assert driver.messages == ["```html\n<think>x</think>\n```"]
    assert result.thought_log is not None
    assert result.thought_log.raw is None


@pytest.mark.parametrize(
    "chunks",
    [["Use `<think>` tags\n"], ["Use `", "<think>", "` tags\n"]],
    ids=["one-chunk", "split"],
)
def test_E4_a_think_tag_inside_inline_code_stays_visible(chunks: list[str]) -> None:
    driver, result = run(chunks)
    assert driver.messages == ["Use `<think>` tags"]
    assert result.thought_log is not None
    assert result.thought_log.raw is None


def test_E4_inline_code_ends_before_a_real_think_block() -> None:
    driver, result = run("Use `<think>` tags and <think>hidden</think> ok\n")
    assert driver.messages == ["Use `<think>` tags and  ok"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "hidden"


# -- E5: details blocks ----------------------------------------------------------------------


# name: (the answer, its chunks' size, the messages it shows, the details content captured)
_DETAILS: dict[str, tuple[str, int, list[str], str | None]] = {
    "a_details_block_is_removed_and_its_summary_stripped": (
        "Before\n<details><summary>Memory</summary>\nremembered fact\n</details>\nAfter\n",
        3,
        ["Before", "After"],
        "remembered fact",
    ),
    "only_the_first_summary_is_stripped": (
        "<details><summary>A</summary>x<summary>B</summary>y</details>Z",
        3,
        ["Z"],
        "x<summary>B</summary>y",
    ),
    "several_details_blocks_are_joined_by_a_blank_line": (
        "<details><summary>S</summary>one</details>A\n<details>two</details>B\n",
        3,
        ["A", "B"],
        "one\n\ntwo",
    ),
    "text_before_and_after_a_block_on_one_line_keeps_its_order": (
        "Start <details><summary>S</summary>hidden</details> end\n",
        3,
        ["Start  end"],
        "hidden",
    ),
    "lines_around_blocks_keep_their_order": (
        "One\n<details>x</details>\nTwo\n<details>y</details>\nThree\n",
        1,
        ["One", "Two", "Three"],
        "x\n\ny",
    ),
    "a_summary_outside_details_is_visible_text": (
        "A<summary>not a label</summary>B\n",
        3,
        ["A<summary>not a label</summary>B"],
        None,
    ),
}


@pytest.mark.parametrize(
    ("text", "size", "messages", "details"), list(_DETAILS.values()), ids=list(_DETAILS)
)
def test_E5_details_blocks(text: str, size: int, messages: list[str], details: str | None) -> None:
    driver, result = run(text, size=size)
    assert driver.messages == messages
    assert result.details_content == details


def test_E5_an_empty_details_block_adds_nothing() -> None:
    _, empty = run("<details><summary>S</summary> \n</details>A\n")
    assert empty.details_content is None
    _, result = run("<details>one</details>A\n<details><summary>S</summary></details>B\n")
    assert result.details_content == "one"


def test_E5_a_details_block_split_across_chunks_at_every_position_is_captured() -> None:
    text = "A\n<details><summary>S</summary>body</details>\nB\n"
    for chunks in splits(text):
        driver, result = run(chunks)
        assert driver.messages == ["A", "B"], chunks
        assert result.details_content == "body", chunks


# -- E8: unterminated blocks at a flush ------------------------------------------------------


def test_E8_an_unterminated_think_block_is_captured_at_the_end() -> None:
    driver, result = run("Answer\n<think>still thinking")
    assert driver.messages == ["Answer"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "still thinking"


def test_E8_an_unterminated_think_block_is_captured_at_a_function_call() -> None:
    driver = started()
    driver.text("Answer\n<think>still thinking")
    driver.chunk(FunctionCallChunk(FunctionCall("lookup")))
    result = driver.settle()
    assert result.status == "function_call"
    assert driver.messages == ["Answer"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "still thinking"


def test_E8_an_unterminated_details_block_is_captured_at_the_end() -> None:
    driver, result = run("Answer\n<details><summary>S</summary>unfinished body")
    assert driver.messages == ["Answer"]
    assert result.details_content == "unfinished body"


def test_E8_a_partial_tag_at_the_end_is_released_as_text() -> None:
    driver, result = run("a <thi")
    assert driver.messages == ["a <thi"]
    assert result.thought_log is not None
    assert result.thought_log.raw is None


def test_E4_a_tag_right_after_a_closed_fence_is_markup_again() -> None:
    # The closing fence line waits in the tail for the next character (E1); a tag arriving
    # in the next chunk is after the block, not inside it.
    driver = Driver()
    driver.start()
    driver.text("```\nx\n```\n", "<think>hidden</think>shown\n")
    result = driver.end()
    assert result.thought_log is not None
    assert result.thought_log.raw == "hidden"
    assert "hidden" not in result.accumulated_text


@pytest.mark.parametrize("degree", [0, 1])
def test_E4_a_stray_closing_tag_captures_every_queued_piece_as_written(degree: int) -> None:
    """At degree 0 (or while Discord is busy) several pieces wait in the outbox: all of them,
    joined as the model wrote them, become the reasoning."""
    config = StreamConfig(delivery="messages", humanizer_degree=degree)
    driver, result = run("one\ntwo\n\nthree\n</think>Answer\n", config=config, size=100)
    assert driver.messages == ["Answer"]
    assert result.thought_log is not None
    assert result.thought_log.raw == "one\ntwo\n\nthree"


@pytest.mark.parametrize("size", [1, 3, 100])
def test_E5_a_stray_closing_details_tag_is_dropped(size: int) -> None:
    """A `</details>` with no block open is markup without content: it is not shown."""
    driver, result = run("Before </details>after\nNext\n", size=size)
    assert "".join(driver.messages).count("details") == 0
    assert driver.messages == ["Before after", "Next"]
    assert result.details_content is None
