"""Example tests for buffering and segmentation, one SPEC rule behaviour each (E1–E3, E6–E10).

Each test walks one scenario step by step: feed this, expect exactly these pieces or messages.
Segmenter tests call `cordstream.domain.segments` directly (`Pieces` below keeps its state
between feeds); stream tests play the shell with `tests.support.driver.Driver`. Think/details
capture (E4, E5) is pinned in `tests/domain/test_capture.py`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from cordstream.domain import (
    ErrorChunk,
    FunctionCall,
    FunctionCallChunk,
    ProviderEnded,
    ProviderError,
    SendMessage,
    StopRequest,
    StreamConfig,
    StreamResult,
    TypingPause,
    graphemes,
    segments,
)
from cordstream.domain.graphemes import is_boundary
from tests.support.answers import as_written, fences_balanced, no_lone_punctuation
from tests.support.driver import Driver, run

# -- helpers ---------------------------------------------------------------------------------


@dataclass
class Pieces:
    """The segmenter driven by hand: `feed` returns the texts of the pieces it finished."""

    max_len: int = 1950
    sentences: bool = False
    seg: segments.Segmenter = field(init=False)
    tail: str = ""

    def __post_init__(self) -> None:
        self.seg = segments.new_segmenter(self.max_len, sentences=self.sentences)

    def feed(self, text: str) -> list[str]:
        self.seg, self.tail, pieces = segments.feed(self.seg, self.tail, text)
        return [piece.text for piece in pieces]

    def flush(self) -> list[str]:
        return [p.text for p in segments.flush(self.seg, self.tail, close_markers=True)]


def started(**config: Any) -> Driver:
    """A driver whose stream has started, every send accepted at once."""
    driver = Driver(StreamConfig(**config))
    driver.start()
    return driver


def deliver(chunks: Iterable[str], config: StreamConfig) -> tuple[Driver, StreamResult]:
    """Like `tests.support.driver.run`, but accepts sends in a loop rather than recursively.

    The driver's `auto_deliver` answers a send from inside the step that made it, which
    recurses once per message; streams of thousands of messages need this loop instead.
    """
    driver = Driver(config, auto_deliver=False)
    driver.start()
    for chunk in chunks:
        driver.text(chunk)
        while driver.pending_send is not None:
            driver.deliver()
    return driver, driver.end()


def chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def pauses(driver: Driver) -> list[TypingPause]:
    return [e for e in driver.of_type(TypingPause) if isinstance(e, TypingPause)]


NO_LIMIT = StreamConfig(flush_limit=0)


# -- E1: boundaries --------------------------------------------------------------------------


def test_E1_newline_is_a_boundary_once_a_character_follows() -> None:
    pieces = Pieces()
    assert pieces.feed("Hello\n") == []  # the newline is the last character: it waits
    assert pieces.feed("W") == ["Hello\n"]
    assert pieces.flush() == ["W"]


def test_E1_newline_followed_by_a_character_in_its_own_chunk_sends_the_line() -> None:
    driver = started()
    driver.text("Hello\n")
    assert driver.sends == []
    driver.text("World")  # no newline, no '<': the machine's fast path
    assert driver.sends == [SendMessage(1, "Hello", reply=True)]


def test_E1_a_fence_line_after_a_chunk_ending_in_newline_opens_a_block() -> None:
    driver = started()
    driver.text("Intro\n", "```python", "\nx = 1\n", "```\n", "Outro")
    assert driver.messages == ["Intro", "```python\nx = 1\n```"]


def test_E1_a_closed_fence_is_a_boundary_on_its_own() -> None:
    pieces = Pieces()
    assert pieces.feed("```py\nx = 1\n") == []
    assert pieces.feed("```\n") == []  # like a newline, it waits for the next character (E6)
    assert pieces.feed("A") == ["```py\nx = 1\n```"]  # no newline needed after that one


def test_E1_a_closed_fence_is_sent_once_any_character_follows() -> None:
    driver = started()
    driver.text("```py\nx = 1\n")
    assert driver.sends == []
    driver.text("```\n")
    assert driver.sends == []
    driver.text("S")
    assert driver.messages == ["```py\nx = 1\n```"]


def test_E1_degree_3_cuts_at_sentence_ends() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("It works. It ") == ["It works. "]
    assert pieces.feed("really works! And") == ["It really works! "]
    assert pieces.flush() == ["And"]


def test_E1_E7_degree_3_a_sentence_longer_than_a_message_is_cut_to_size() -> None:
    # What waits stays under the overflow size; the chunk that ends the sentence takes it past
    # a message. The sentence end must not make a piece longer than a message (E7).
    pieces = Pieces(max_len=20, sentences=True)
    assert pieces.feed("a" * 15) == []
    out = pieces.feed(" and more words. Next")
    assert out == ["a" * 15 + " and ", "more words. "]
    assert pieces.flush() == ["Next"]


def test_E1_degree_3_does_not_cut_after_an_abbreviation() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("Dr. Smith arrived, e.g. at noon. Then") == [
        "Dr. Smith arrived, e.g. at noon. "
    ]


def test_E1_degree_3_an_abbreviation_after_an_opening_quote_is_no_sentence_end() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("He said 'Dr. Smith is in' at noon. Then") == [
        "He said 'Dr. Smith is in' at noon. "
    ]


def test_E1_degree_3_does_not_cut_inside_a_decimal() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("Pi is 3.") == []  # "3." may still become "3.14"
    assert pieces.feed("14 exactly. Next") == ["Pi is 3.14 exactly. "]


def test_E1_degree_3_a_full_stop_at_the_very_end_waits() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("It works.") == []
    assert pieces.feed(" ") == []  # still nothing after it: the next word may be lower case
    assert pieces.feed("Next") == ["It works. "]


def test_E1_degree_3_a_full_stop_followed_by_lower_case_is_not_a_sentence_end() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("Use version 2. it is newer.\n") == []
    assert pieces.flush() == ["Use version 2. it is newer.\n"]


def test_E1_degree_3_cuts_after_a_cjk_full_stop() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("你好。世界。再") == ["你好。", "世界。"]


def test_E1_sentence_ends_are_not_boundaries_below_degree_3() -> None:
    driver, _ = run("One. Two! Three? Four", config=StreamConfig(humanizer_degree=1))
    assert driver.messages == ["One. Two! Three? Four"]


# -- E2: holding -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opener", "closer"),
    [('"', '"'), ("“", "”"), ("(", ")"), ("[", "]")],
    ids=["quote", "curly-quote", "paren", "bracket"],
)
def test_E2_an_unbalanced_construct_holds_the_segment(opener: str, closer: str) -> None:
    pieces = Pieces()
    assert pieces.feed(f"He said {opener}hi\nthere") == []  # the first line is held
    assert pieces.feed(f"{closer} she said\nNext") == [
        f"He said {opener}hi\nthere{closer} she said\n"
    ]


def test_E2_a_table_is_held_until_a_non_row_line() -> None:
    pieces = Pieces()
    assert pieces.feed("| a | b |\n") == []
    assert pieces.feed("|---|---|\n") == []
    assert pieces.feed("| 1 | 2 |\n") == []
    assert pieces.feed("| 3 | 4 |\nAfter") == []  # every row complete, still growing
    assert pieces.feed(" all\nMore") == [
        "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n",
        "After all\n",
    ]


def test_E2_a_line_with_every_quote_and_bracket_is_counted_like_any_other() -> None:
    balance = segments.EVEN.plus('She said "hi", “bye” (see [1]) and (then')
    assert balance == segments.Balance(quotes=2, curly=0, parens=1, brackets=0)
    assert not balance.closed  # the last parenthesis is still open: the text waits


def test_E2_a_frown_does_not_count_as_an_open_parenthesis() -> None:
    driver = started()
    driver.text("Oh no :(\nNext")
    assert driver.messages == ["Oh no :("]


def test_E2_a_lone_frown_does_not_stall_the_answer() -> None:
    driver = started()
    driver.text("Oh no :( ")
    for _ in range(30):
        driver.text("word " * 10)  # 1,500 characters on the same line, nothing closes
    assert driver.sends, "nothing delivered before the end"
    driver.end()
    as_written(driver.messages, "Oh no :( " + "word " * 300)


def test_E2_an_open_parenthesis_is_held_at_most_the_overflow_size() -> None:
    driver = started()
    driver.text("Note (see below\n")
    for i in range(15):
        driver.text(f"line {i:02d} " + "x" * 90 + "\n")  # 15 lines of 99 characters, no ')'
    assert driver.sends, "the held paragraph never left the buffer"
    assert all(len(m) <= 1950 for m in driver.messages)


# -- E3: code fences -------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_E3_a_code_block_that_fits_stays_whole(size: int) -> None:
    text = "Intro\n```python\nx = 1\ny = 2\n```\nOutro\n"
    driver, _ = run(text, size=size)
    block = "```python\nx = 1\ny = 2\n```"
    assert sum(block in m for m in driver.messages) == 1
    assert all(m.count("```") in (0, 2) for m in driver.messages)


def test_E3_a_longer_block_is_split_linewise_and_every_piece_rewrapped() -> None:
    lines = [f"line_{i:03d} = {i}" for i in range(30)]
    text = "```python\n" + "\n".join(lines) + "\n```\n"
    driver, _ = run(text, config=StreamConfig(max_message_length=200))
    assert len(driver.messages) > 1
    inner: list[str] = []
    for message in driver.messages:
        assert len(message) <= 200
        assert message.startswith("```python\n"), message
        assert message.endswith("\n```"), message
        inner.extend(message.removeprefix("```python\n").removesuffix("\n```").split("\n"))
    assert inner == lines  # line-wise: no line cut, none lost or repeated


def test_E3_a_fence_still_open_at_the_end_is_closed() -> None:
    driver, result = run("Look:\n```js\nlet a = 1;\nlet b")
    assert driver.messages == ["Look:", "```js\nlet a = 1;\nlet b\n```"]
    assert result.status == "completed"


@pytest.mark.parametrize("fence", ["```", "```py", "````"])
@pytest.mark.parametrize("degree", [0, 1])
def test_E3_an_opening_fence_line_that_ends_the_answer_without_its_newline_is_not_sent(
    fence: str, degree: int
) -> None:
    """Markup alone, as with its newline: never a message with a fence left open, alone or
    packed after a closed block."""
    config = StreamConfig(humanizer_degree=degree)
    for text in (f"Hi\n{fence}", f"Hi\n```\nx\n```\n{fence}"):
        for ending in ("end", "stop"):
            driver = Driver(config)
            driver.start()
            driver.text(text)
            if ending == "stop":
                driver.request(StopRequest("stop", "user-1"))  # the pending flush (E8)
            else:
                driver.feed(ProviderEnded(driver.now))
            driver.settle()
            assert all(fences_balanced(m) for m in driver.messages), driver.messages
            assert "\n".join(driver.messages) == text.removesuffix(fence).strip()


def test_E3_a_single_50_kb_code_line_is_cut_into_wrapped_pieces() -> None:
    code = "x" * 50_000
    driver, _ = deliver(chunked(f"```text\n{code}\n```\n", 4096), NO_LIMIT)
    assert len(driver.messages) >= math.ceil(50_000 / 1950)
    inner = ""
    for message in driver.messages:
        assert len(message) <= 1950
        assert message.startswith("```text\n"), message[:20]
        assert message.endswith("\n```"), message[-20:]
        inner += message.removeprefix("```text\n").removesuffix("\n```")
    assert inner == code


# -- E6: nothing visible dropped -------------------------------------------------------------


def test_E6_a_one_character_cjk_line_is_delivered() -> None:
    driver, _ = run("好的\n嗯\n明白了\n", size=1)
    assert driver.messages == ["好的", "嗯", "明白了"]


def test_E6_a_one_character_answer_is_delivered() -> None:
    driver, result = run("嗯")
    assert driver.messages == ["嗯"]
    assert result.status == "completed"


@pytest.mark.parametrize("chunks", [["!\n\n "], ["...)\n", "\n "], ["...\n", "\n", " "]])
def test_E6_punctuation_alone_then_blank_lines_is_kept_not_dropped(chunks: list[str]) -> None:
    """Punctuation with no piece before it waits as glue for the next piece; blank text after
    it joins it, and the end of the answer delivers both (nothing disappears)."""
    pieces = Pieces()
    out = [text for chunk in chunks for text in pieces.feed(chunk)] + pieces.flush()
    assert out == ["".join(chunks)]


def test_E6_whitespace_only_text_is_never_sent() -> None:
    driver, result = run("   \n\n\t\n  ", size=1)
    assert driver.sends == []
    assert result.status == "empty_response"


def test_E6_whitespace_only_lines_between_text_are_not_sent() -> None:
    driver, _ = run("Answer\n   \n\t\nMore\n", size=1)
    assert driver.messages == ["Answer", "More"]


@pytest.mark.parametrize("line", [":)", "...", "!", "?!"])
def test_E6_a_punctuation_only_line_is_merged_into_the_previous_message(line: str) -> None:
    driver, _ = run(f"Great\n{line}\nNext\n", size=1)
    assert driver.messages == [f"Great\n{line}", "Next"]


def test_E6_a_punctuation_only_last_line_is_merged_into_the_previous_message() -> None:
    driver, _ = run("Great\n:)", size=1)
    assert driver.messages == ["Great\n:)"]


def test_E6_a_punctuation_only_line_is_merged_at_degree_2_too() -> None:
    driver, _ = run("Hi\n!\nBye\n", size=1, config=StreamConfig(humanizer_degree=2))
    assert driver.messages == ["Hi\n!", "Bye"]


def test_E6_a_punctuation_only_line_after_a_blank_line_is_not_sent_alone() -> None:
    driver, _ = run("Great\n\n:)\nNext\n", size=1)
    assert ":)" not in driver.messages


def test_E6_a_punctuation_only_line_after_a_code_block_is_not_sent_alone() -> None:
    driver = started()
    driver.text("```\ncode\n", "```\n", ":)\n", "Next\n")
    driver.end()
    assert ":)" not in driver.messages


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_E6_E7_punctuation_that_opens_a_long_code_block_is_shown_once(degree: int) -> None:
    """Punctuation alone before a fence starts the block's first piece (E6); when the block is
    cut into several messages (E7), only the first carries it."""
    lines = "".join(f"print({i})  # a line of code number {i}\n" for i in range(12))
    config = StreamConfig(max_message_length=200, humanizer_degree=degree)
    driver, _ = run("...\n```py\n" + lines + "```\nAfter\n", config=config, size=5)
    assert len(driver.messages) >= 3
    assert driver.messages[0].startswith("...\n```py\nprint(0)")
    assert [m.count("...") for m in driver.messages] == [1] + [0] * (len(driver.messages) - 1)


# -- E6: punctuation alone joins its neighbour, before or after, in every delivery path --------

_WELL = "Well, I think so."


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_E6_the_issue_example_punctuation_first_then_a_pause(degree: int) -> None:
    """ "...\n", 0.3 s of nothing, then the answer: "..." waits for it and goes with it."""
    driver = started(humanizer_degree=degree)
    driver.text("...\n")
    driver.advance(0.3)
    assert driver.sends == []
    driver.text(_WELL + "\n")
    driver.end()
    assert driver.messages == ["...\n" + _WELL]


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
@pytest.mark.parametrize("size", [1, 3, 1000])
@pytest.mark.parametrize(
    ("text", "messages"),
    [
        ("...\n" + _WELL + "\nMore here.\n", ["...\n" + _WELL, "More here."]),
        (":)\n!\n...\nHello\nBye\n", [":)\n!\n...\nHello", "Bye"]),  # several lines
        ("\n\n...\n\nHello\nBye\n", ["...\n\nHello", "Bye"]),  # after blank lines
        ("...\n```py\nx = 1\n```\nAfter\n", ["...\n```py\nx = 1\n```", "After"]),  # code
        ("Hi\n...\nBye\n", ["Hi\n...", "Bye"]),  # joins the one before
        ("Hi\n\n...\n\nBye\n", ["Hi\n\n...", "Bye"]),
        ("```\ncode\n```\n...\nNext\n", ["```\ncode\n```\n...", "Next"]),
        ("| a |\n...\nNext\n", ["| a |\n...", "Next"]),
    ],
    ids=["first", "several", "after-blanks", "before-code", "after", "blanks", "code", "table"],
)
def test_E6_a_punctuation_only_line_never_is_a_message_at_any_degree(
    text: str, messages: list[str], size: int, degree: int
) -> None:
    if degree == 0:  # everything in one message at the end
        messages = [text.strip()]
    driver, _ = run(text, config=StreamConfig(humanizer_degree=degree), size=size)
    assert driver.messages == messages


@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize(
    "ending", ["function-call", "provider-end", "user-stop", "timeout", "provider-error"]
)
def test_E6_punctuation_waiting_for_its_neighbour_goes_with_it_at_every_flush(
    ending: str, degree: int
) -> None:
    """The flush (E8) delivers the punctuation with the last line, whatever ends the stream."""
    driver = started(humanizer_degree=degree)
    driver.text("...\n", "Well")
    result = _ENDINGS[ending](driver)
    assert driver.messages == ["...\nWell"], result.status


@pytest.mark.parametrize("degree", [2, 3])
def test_E6_a_stop_during_a_typing_pause_keeps_punctuation_with_its_neighbour(
    degree: int,
) -> None:
    driver = started(humanizer_degree=degree)
    driver.text("First line.\n", "Second line.\n", "...\n", "Third")
    assert driver.pause is not None  # "Second line." waits as if typed
    driver.request(StopRequest("stop", "bob"))
    driver.settle()
    assert driver.messages == ["First line.", "Second line.\n...\nThird"]


@pytest.mark.parametrize("size", [7, 1000])
def test_E6_punctuation_after_a_piece_too_full_to_take_it_takes_its_end_along(
    size: int,
) -> None:
    """Joined, the two would not fit: the end of the full piece moves over to the punctuation
    (cut at a space), so neither is a message of its own and both fit (E7)."""
    config = StreamConfig(max_message_length=200)
    full = "word " * 39 + "full"  # 199 characters: "\n..." does not fit after it
    driver, _ = run(full + "\n...\nNext line\n", config=config, size=size)
    assert driver.messages == [full[: full.rfind(" ")], "full\n...", "Next line"]


@pytest.mark.parametrize("blank", ["\n", "\n\n", "\n  \n"])
@pytest.mark.parametrize("size", [7, 38, 1000])
def test_E6_punctuation_after_a_full_line_and_a_blank_line_takes_its_end_along(
    blank: str, size: int
) -> None:
    """A line exactly as long as a message, a blank line, then punctuation as the last line:
    the full line waits with the blank line, so the punctuation can still take its end."""
    config = StreamConfig(max_message_length=200)
    text = "a" * 200 + "\n" + blank + ":)\n"
    driver, _ = run(text, config=config, size=size)
    assert all(len(m) <= 200 for m in driver.messages)
    assert ":)" not in driver.messages
    assert "".join(driver.messages).replace("\n", "").replace(" ", "") == "a" * 200 + ":)"


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
@pytest.mark.parametrize("blank", ["", "\n"])
def test_E6_punctuation_after_a_full_line_takes_its_end_along_wherever_the_chunks_split(
    blank: str, degree: int
) -> None:
    """The full line can leave the segmenter as a cut of the overflow rather than as a line
    (a chunk ends right after its newline): it still waits for what follows, so punctuation
    arriving in the next chunk takes its end along (E6), at every degree."""
    config = StreamConfig(max_message_length=200, humanizer_degree=degree)
    text = "a" * 200 + "\n" + blank + ":)\n"
    for split in range(1, len(text)):
        driver = Driver(config)
        driver.start()
        driver.text(text[:split], text[split:])
        driver.end()
        assert all(len(m) <= 200 for m in driver.messages), split
        assert ":)" not in driver.messages, (split, driver.messages)
        assert "".join(driver.messages).replace("\n", "") == "a" * 200 + ":)", split


@pytest.mark.parametrize("degree", [0, 1])
def test_E3_E6_punctuation_at_the_end_never_takes_a_code_blocks_end_along(degree: int) -> None:
    """A block too full to take the punctuation after it keeps its lines and its fence: moving
    its end over, as prose does, would cut the block in two unfenced halves (E3). The
    punctuation goes as it is instead (E6's "nothing disappears" outranks its merge)."""
    block = "```\n" + "x = 1\n" * 31 + "```"  # 193 characters: "\n!!!!!!!!" does not fit
    driver = Driver(StreamConfig(max_message_length=200, humanizer_degree=degree))
    driver.start()
    driver.text(block + "\n", "!!!!!!!!")
    driver.end()
    assert driver.messages == [block, "!!!!!!!!"]


@pytest.mark.parametrize("between", ["\n\n", "\n \n"])
def test_E3_E6_a_code_block_waiting_with_a_blank_line_after_it_is_still_a_code_block(
    between: str,
) -> None:
    """The blank line waits with the finished block (`Piece.extended`), which stays a code
    piece: the punctuation after it does not take its end along either."""
    block = "```\n" + "x = 1\n" * 31 + "```"
    driver = Driver(StreamConfig(max_message_length=200))
    driver.start()
    driver.text(block + between, "!!!!!!!!")
    driver.end()
    assert driver.messages == [block, "!!!!!!!!"]


def test_E6_punctuation_at_the_end_after_a_piece_too_full_moves_its_end_over() -> None:
    """Nothing follows: the end of the full piece goes with the punctuation instead."""
    config = StreamConfig(max_message_length=200)
    full = "word " * 39 + "full"
    driver, _ = run(full + "\n...", config=config, size=1000)
    assert driver.messages == [full[: full.rfind(" ")], "full\n..."]


def test_E6_an_answer_of_punctuation_only_is_still_delivered() -> None:
    driver, result = run("...\n!\n", size=1, config=StreamConfig(humanizer_degree=2))
    assert driver.messages == ["...\n!"]
    assert result.status == "completed"


def test_E6_punctuation_after_a_think_block_waits_for_the_answer() -> None:
    driver, result = run("<think>hm</think>...\n" + _WELL + "\n", size=2)
    assert driver.messages == ["...\n" + _WELL]
    assert result.thought_log is not None
    assert result.thought_log.raw == "hm"


@pytest.mark.parametrize("size", [1, 1000])
def test_E6_punctuation_sentences_after_a_code_block_get_one_line_break(size: int) -> None:
    """Degree 3: "... ", "! ", "..." join the block one after the other; only the first one
    starts a new line (after the fence), the others stay on it as written."""
    text = "```\nx = 1\n```\n... ! ...\nNext\n"
    driver, _ = run(text, config=StreamConfig(humanizer_degree=3), size=size)
    assert driver.messages == ["```\nx = 1\n```\n... ! ...", "Next"]


@pytest.mark.parametrize("blank", ["\n", "\n\n", "  \n"])
def test_E3_a_split_block_sends_no_empty_block_for_its_opening_line(blank: str) -> None:
    """An opening line and blank lines are not worth a message of their own: an empty block
    ("```python\n```") would show as a box with nothing in it."""
    text = "Intro\n```python\n" + blank + "x" * 300 + "\n```\n"
    driver, _ = run(text, config=StreamConfig(max_message_length=200), size=1000)
    assert all("x" in m for m in driver.messages[1:]), driver.messages
    assert driver.messages[1].startswith("```python\n" + blank)  # the blank lines as written
    as_written(driver.messages, text, fences=True)


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_E3_an_opening_line_longer_than_a_message_is_its_fence_and_language_word(
    size: int,
) -> None:
    """An info string longer than a message is markup Markdown does not show: the block opens
    with its fence and language word, and the code follows; no piece shows a cut fence line
    (found by the shell's state machine, in live delivery)."""
    info = "python " + "@everyone " * 20
    text = "Intro\n```" + info + "A whole line.\nx = 1\n```\nAfter\n"
    driver, _ = run(text, config=StreamConfig(max_message_length=200), size=size)
    assert not any("@everyone" in message for message in driver.messages), driver.messages
    assert any(m.endswith("```python\nx = 1\n```") for m in driver.messages), driver.messages
    as_written(driver.messages, text, fences=True)


def test_E3_E4_a_stray_closing_tag_retracts_an_opening_line_longer_than_a_message() -> None:
    """What the reopening line stands for is still the model's text: a stray `</think>` takes
    all of it into the thought log (E4), the fence line whole."""
    line = "```python " + "word " * 50 + "\n"
    pieces = Pieces(max_len=200)
    assert pieces.feed(line + "x = 1\n") == []
    assert segments.context(pieces.seg, pieces.tail) == ("```", "")
    assert pieces.seg.buffered + pieces.tail == line + "x = 1\n"


def test_E3_an_empty_block_with_an_opening_line_longer_than_a_message_shows_nothing() -> None:
    pieces = Pieces(max_len=200)
    out = pieces.feed("```python " + "word " * 50 + "\n```\nAfter\n") + pieces.flush()
    assert out == ["After\n"]


def test_E6_blank_lines_after_a_block_our_fence_closed_are_kept_whole() -> None:
    """The block's last piece ended with our closing fence, and the model's own came with
    nothing before it: no piece waits, so the blank lines after the block wait on their own,
    all of them, for the text after them (make mutate: one was dropped as the run grew)."""
    pieces = Pieces(max_len=200)
    code = "x" * 192  # exactly fills the block's first piece: its newline is all that is left
    out = pieces.feed("```\n" + code + "\n```\n\n\nText\n") + pieces.flush()
    assert out == ["```\n" + code + "\n```", "\n\n", "Text\n"]


def test_E2_E4_a_cut_through_a_closed_code_span_leaves_the_rest_of_the_line_prose() -> None:
    """An overflow cut whose piece holds a whole inline code span (two backticks) does not
    leave the rest of the line inside one: a think block after it is still captured (E4)."""
    line = "Run `ls` now, " + "word " * 60 + "<think>hidden</think> done\n"
    driver, result = run(line, config=StreamConfig(max_message_length=200), size=7)
    shown = "".join(driver.messages)
    assert "hidden" not in shown
    assert "`ls`" in shown
    assert shown.endswith(" done")
    assert result.thought_log is not None
    assert result.thought_log.raw == "hidden"


@pytest.mark.parametrize("size", [7, 10_000])
def test_E3_a_prose_line_that_starts_like_a_fence_is_closed_where_it_is_cut(size: int) -> None:
    """Backticks and 500 characters, then more backticks: prose (a fence line holds no
    backtick after its fence), but cut before that backtick, its start reads as an opening
    fence line: the piece that ends there closes it. Arriving in small chunks, the overflow
    opened a block on it first (E2), and the line is the block's opening line (E3)."""
    text = "```" + "y" * 500 + "```python\nAfter\n"
    driver, _ = run(text, config=StreamConfig(max_message_length=200), size=size)
    assert all(fences_balanced(message) for message in driver.messages), driver.messages
    assert all(len(message) <= 200 for message in driver.messages)
    if size > len(text):  # whole: prose, all of it shown
        shown = "".join(driver.messages).replace("\n```", "", 1).replace("\n", "")
        assert shown == text.replace("\n", "")


def test_E2_a_winking_sad_face_opens_no_parenthesis() -> None:
    """`;(` is an emoticon, like `:(`: the line is balanced and leaves at its newline."""
    assert Pieces().feed("Oh no ;(\nNext") == ["Oh no ;(\n"]


def test_E1_at_degree_3_a_sentence_end_after_a_closing_quote_is_found_across_chunks() -> None:
    """The chunk ends after `."`: the next chunk's blank makes it a sentence end (E1)."""
    pieces = Pieces(sentences=True)
    assert pieces.feed('He said "Stop."') == []
    assert pieces.feed(" Then more") == ['He said "Stop." ']


def test_E6_the_segmenter_holds_leading_punctuation_for_the_next_piece() -> None:
    pieces = Pieces()
    assert pieces.feed("...\n") == []
    assert pieces.feed("Well") == []  # "..." is finished, but it waits for its neighbour
    assert pieces.feed(", I think so.\nN") == ["...\nWell, I think so.\n"]
    assert pieces.flush() == ["N"]


# -- E6: blank lines reach Discord as written, after a table like after anything else -----------

AT_THE_END = StreamConfig(humanizer_degree=0)  # everything leaves in one message at the end


@pytest.mark.parametrize("size", [1, 3, 1000])
@pytest.mark.parametrize(
    "text",
    [
        "| 1 | 2 |\n\nNext paragraph.",
        "| 1 | 2 |\n\n\nNext paragraph.",
        "| 1 | 2 |\n\n\n\n\nNext paragraph.",
        "| 1 | 2 |\n  \n\t\nNext paragraph.",  # blank lines holding spaces and a tab
        "| a | b |\n|---|---|\n| 1 | 2 |\n\nNext paragraph.\n\nAnd another.",
        "Prose.\n\n| 1 | 2 |\n\nMore prose.\n\n| 3 | 4 |\n\nEnd.",
        "- item\n  | a | b |\n  |---|---|\n\n- next item",  # a table inside a list
        "| a |\n\n```py\nx = 1\n```\n\nAfter the code.",  # a table, then a fence
        "| a |\n```py\nx = 1\n```\n\n\nAfter the code.",
        "| a |\n\n| b |",  # two tables: the blank line is what separates them
    ],
)
def test_E6_blank_lines_after_a_table_are_kept(text: str, size: int) -> None:
    driver, _ = run(text, config=AT_THE_END, size=size)
    assert driver.messages == [text]


@pytest.mark.parametrize("size", [1, 2, 1000])
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("| a |\n\n<think>hidden</think>Next", "| a |\n\nNext"),
        ("| a |\n<think>hidden</think>\n\nNext", "| a |\n\n\nNext"),
        ("| a |\n\n<details><summary>s</summary>body</details>\nNext", "| a |\n\n\nNext"),
    ],
)
def test_E6_blank_lines_around_a_removed_block_after_a_table_are_kept(
    text: str, shown: str, size: int
) -> None:
    driver, _ = run(text, config=AT_THE_END, size=size)
    assert driver.messages == [shown]  # the block goes (E4, E5); the lines around it stay


def test_E6_a_table_keeps_its_blank_line_at_the_end_of_a_long_message() -> None:
    prose = "word " * 300 + "\n"  # 1,501 characters, then the table in the same message
    text = prose + "| a | b |\n|---|---|\n\n\nNext"
    driver, _ = run(text, config=AT_THE_END, size=7)
    assert driver.messages == [text.strip()]


def test_E6_a_table_sent_with_the_next_line_while_discord_is_busy_keeps_the_blank() -> None:
    driver = Driver(StreamConfig(humanizer_degree=1), auto_deliver=False)
    driver.start()
    driver.text("Intro\nmo")
    assert driver.pending_send == SendMessage(1, "Intro", reply=True)
    driver.text("re\n| 1 | 2 |\n\nNext\nX")  # three pieces ready while "Intro" is in flight
    driver.deliver()
    assert driver.pending_send == SendMessage(2, "more\n| 1 | 2 |\n\nNext", reply=False)
    driver.end()
    assert driver.messages == ["Intro", "more\n| 1 | 2 |\n\nNext", "X"]


def test_E6_the_segmenter_keeps_the_blank_lines_after_a_table_with_its_piece() -> None:
    pieces = Pieces()
    assert pieces.feed("| 1 | 2 |\n") == []  # the table may still grow
    assert pieces.feed("\n") == []  # it ended; it waits for what follows the blank line
    assert pieces.feed("\nN") == ["| 1 | 2 |\n\n\n"]
    assert pieces.flush() == ["N"]


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_E6_a_punctuation_only_line_after_a_table_is_not_sent_alone(degree: int) -> None:
    driver, _ = run("| a |\n...\nNext\n", size=1, config=StreamConfig(humanizer_degree=degree))
    assert driver.messages == ["| a |\n...", "Next"]


@pytest.mark.parametrize("size", [1, 2, 1000])
def test_E6_punctuation_joining_a_sentence_at_degree_3_is_not_moved_to_a_new_line(
    size: int,
) -> None:
    driver, _ = run("Wow! ...\nNext\n", size=size, config=StreamConfig(humanizer_degree=3))
    assert driver.messages == ["Wow! ...", "Next"]  # not "Wow! \n..."


# -- E7: message size and grapheme clusters --------------------------------------------------

_TEN_MB = 10 * 1024 * 1024
_BIG_LINE = ("stream 👨‍👩‍👧‍👦 🇫🇷 e\u0301 漢字 " * (_TEN_MB // 20 + 1))[:_TEN_MB]


@pytest.mark.parametrize("line", ["!" * 5000, "..." * 1000, " " * 5000])
def test_E7_a_punctuation_or_blank_line_longer_than_a_message_after_a_piece_fits(
    line: str,
) -> None:
    """Whole in one chunk, after a finished piece it cannot join (E6): cut like any line."""
    config = StreamConfig(max_message_length=200, flush_limit=0)
    pieces = Pieces(max_len=200)
    texts = pieces.feed("Hi\n" + line + "\nNext\n") + pieces.flush()
    assert all(len(text.rstrip()) <= 200 for text in texts)  # trailing whitespace is trimmed
    driver, _ = run("Hi\n" + line + "\nNext", config=config, size=10_000)
    assert all(len(m) <= 200 for m in driver.messages)
    assert "".join(driver.messages) == ("Hi" + line + "Next").replace(" ", "")


@pytest.mark.parametrize("size", [None, 4096], ids=["one-chunk", "4096-chunks"])
def test_E7_a_10_mb_single_line_fits_every_message(size: int | None) -> None:
    chunks = [_BIG_LINE] if size is None else chunked(_BIG_LINE, size)
    driver, result = deliver(chunks, NO_LIMIT)
    assert result.status == "completed"
    assert max(len(m) for m in driver.messages) <= 1950
    as_written(driver.messages, _BIG_LINE)


@pytest.mark.parametrize("single_line", [False, True], ids=["lines", "one-line"])
def test_E7_a_paragraph_held_by_an_unclosed_parenthesis_fits_every_message(
    single_line: bool,
) -> None:
    body = "".join(f"part {i} of an aside that goes on " for i in range(400))
    text = "Consider this (an aside " + (body if single_line else body.replace("on ", "on\n"))
    driver, _ = deliver(chunked(text, 5), StreamConfig(max_message_length=200, flush_limit=0))
    assert max(len(m) for m in driver.messages) <= 200
    as_written(driver.messages, text)


@pytest.mark.parametrize("max_len", [200, 1950])
def test_E7_a_50_kb_code_line_fits_every_message(max_len: int) -> None:
    text = "```c\n" + ("a[i] = b; " * 5000) + "\n```\n"
    config = StreamConfig(max_message_length=max_len, flush_limit=0)
    driver, _ = deliver(chunked(text, 4096), config)
    assert max(len(m) for m in driver.messages) <= max_len
    assert all(fences_balanced(m) for m in driver.messages)
    as_written(driver.messages, text, fences=True)


_CLUSTERS = {
    "zwj-family": "👨‍👩‍👧‍👦",
    "flags": "🇫🇷🇯🇵",
    "skin-tone": "👍🏽",
    "combining": "e\u0301",
    "stacked-combining": "a\u0301\u0302\u0303",
}


@pytest.mark.parametrize("size", [None, 7, 1001], ids=["one-chunk", "7-chunks", "1001-chunks"])
@pytest.mark.parametrize("cluster", list(_CLUSTERS.values()), ids=list(_CLUSTERS))
def test_E7_a_cut_never_splits_a_grapheme_cluster(cluster: str, size: int | None) -> None:
    text = "x" + cluster * (5000 // len(cluster))  # no whitespace: every cut is a hard cut
    chunks = [text] if size is None else chunked(text, size)
    driver, _ = deliver(chunks, StreamConfig(max_message_length=200))
    assert "".join(driver.messages) == text
    position = 0
    for message in driver.messages[:-1]:
        assert len(message) <= 200
        position += len(message)
        # anchor=0: regional indicators paired exactly from the text's start (the flag run
        # starts at offset 1, so the unanchored approximation, even offsets, would be wrong).
        exact = is_boundary(text, position, anchor=0)
        assert exact, (position, text[position - 3 : position + 3])


def _exactly(length: int) -> dict[str, str]:
    """Answers whose first message can be exactly `length` code points long, by path."""
    half = length // 2
    return {
        "one-line": "a" * length + "\nnext",  # a complete line
        "packed": "a" * (half - 1) + "\n" + "b" * (length - half),  # two pieces share it
        "held": "(" + "d" * (length - 2) + ")",  # held by a parenthesis to the end
        "code": "```\n" + "c" * (length - 8) + "\n```",  # a whole block
        "code-then-text": "```\n" + "c" * (length - 8) + "\n```\nafter",
    }


@pytest.mark.parametrize("max_len", [200, 1950, 2000])
@pytest.mark.parametrize("path", list(_exactly(200)))
def test_E7_a_message_may_be_exactly_max_message_length_long(max_len: int, path: str) -> None:
    """The limit is inclusive: exactly `max_message_length` is one message, sent whole."""
    text = _exactly(max_len)[path]
    config = StreamConfig(max_message_length=max_len, humanizer_degree=0)
    driver, _ = run(text, config=config, size=len(text))
    assert len(driver.messages[0]) == max_len, [len(m) for m in driver.messages]
    assert driver.messages[0] == text[:max_len]


@pytest.mark.parametrize("max_len", [200, 1950, 2000])
@pytest.mark.parametrize("path", list(_exactly(200)))
def test_E7_one_code_point_more_than_max_message_length_is_two_messages(
    max_len: int, path: str
) -> None:
    text = _exactly(max_len + 1)[path]
    config = StreamConfig(max_message_length=max_len, humanizer_degree=0)
    driver, _ = run(text, config=config, size=len(text))
    assert all(len(m) <= max_len for m in driver.messages)
    assert len(driver.messages) >= 2
    assert len(driver.messages[0]) < len(text[: max_len + 1])


def test_E7_pieces_that_fill_a_message_exactly_share_it_at_degree_1() -> None:
    """Discord busy: ready pieces are packed up to the limit, the limit included."""
    driver = Driver(StreamConfig(max_message_length=200), auto_deliver=False)
    driver.start()
    driver.text("First\nx")
    assert driver.pending_send == SendMessage(1, "First", reply=True)
    driver.text("a" * 98 + "\n" + "b" * 100 + "\nc")  # 200 characters ready, then more
    driver.deliver()
    assert driver.pending_send == SendMessage(2, "x" + "a" * 98 + "\n" + "b" * 100, reply=False)


# The issue's example: a cluster of 201 code points that starts 150 before the limit. It fits a
# message, so it is never cut, however far back from the limit it starts (E7).
_LATE_CLUSTER = "x" * 1800 + "e" + "\u0301" * 200 + "y" * 400


@pytest.mark.parametrize("size", [None, 1, 7, 100, 1000, 1801], ids=lambda s: f"chunks-{s}")
@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("", ""),  # prose cut by the overflow (E2)
        ("(", ")\n"),  # held by an open parenthesis, cut at the flush
        ("```\n", "\n```\n"),  # a code line longer than a message
        ("word " * 360, ""),  # whitespace far before the limit, the cluster after it
    ],
    ids=["prose", "held", "code", "after-words"],
)
def test_E7_a_cluster_that_fits_a_message_is_never_cut(
    before: str, after: str, size: int | None
) -> None:
    text = before + _LATE_CLUSTER + after
    chunks = [text] if size is None else chunked(text, size)
    driver, _ = deliver(chunks, NO_LIMIT)
    cluster = "e" + "\u0301" * 200
    assert sum(m.count(cluster) for m in driver.messages) == 1  # whole, in one message
    for message in driver.messages:
        assert len(message) <= 1950
        assert not message.startswith("\u0301")
        assert not message.replace("```\n", "").startswith("\u0301")


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_E7_the_issue_example_is_cut_before_the_cluster_at_every_degree(degree: int) -> None:
    driver, _ = run(_LATE_CLUSTER, config=StreamConfig(humanizer_degree=degree), size=10_000)
    assert driver.messages == ["x" * 1800, _LATE_CLUSTER[1800:]]


@pytest.mark.parametrize("space", [" ", ". ", "! "])
@pytest.mark.parametrize("degree", [1, 3])
def test_E7_a_mark_on_a_space_keeps_it_with_the_space(space: str, degree: int) -> None:
    """A combining mark after a space is one cluster with it (a newline is not: a cluster ends
    after a line feed): the whitespace or sentence-end cut moves to a real boundary (E7)."""
    text = "a" * 150 + space + "\u0301" + "b" * 100
    config = StreamConfig(max_message_length=200, humanizer_degree=degree)
    driver, _ = run(text, config=config, size=10_000)
    assert "".join(driver.messages) == text
    assert all(not message.startswith("\u0301") for message in driver.messages)


def _boundary_checks(text: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many times the splitter asks `is_boundary` to deliver `text` (one chunk, then 7)."""
    calls = 0
    original = graphemes.is_boundary

    def counted(text: str, index: int, anchor: int | None = None) -> bool:
        nonlocal calls
        calls += 1
        return original(text, index, anchor)

    monkeypatch.setattr(graphemes, "is_boundary", counted)
    monkeypatch.setattr(segments, "is_boundary", counted)
    for chunks in ([text], chunked(text, 7)):
        driver, _ = deliver(chunks, NO_LIMIT)
        assert all(len(m) <= 1950 for m in driver.messages)
    monkeypatch.undo()
    return calls


def test_E7_E10_keeping_clusters_whole_stays_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clusters that start far before the limit, longer than a message (zalgo), flags and
    conjuncts: each cut may step back a whole message, yet the steps stay linear in the text
    (counted, not timed: 4 times the text, 4 times the work)."""
    unit = (
        _LATE_CLUSTER
        + "y " * 50
        + "a" + "\u0301" * 3000  # one cluster longer than a message: the limit wins
        + "\U0001f1eb\U0001f1f7" * 300  # flags
        + "\u0915\u094d\u0937" * 100  # conjuncts
    )  # fmt: skip
    small = _boundary_checks(unit * 5, monkeypatch)
    large = _boundary_checks(unit * 20, monkeypatch)
    assert small > 0
    assert large <= 4.4 * small, (small, large)
    assert large <= 2 * len(unit * 20) * 2  # a bounded number per code point, both runs


# -- E8: flushes -----------------------------------------------------------------------------


def _function_call(driver: Driver) -> StreamResult:
    driver.chunk(FunctionCallChunk(FunctionCall("lookup", {"q": "x"})))
    return driver.settle()


def _provider_end(driver: Driver) -> StreamResult:
    return driver.end()


def _user_stop(driver: Driver) -> StreamResult:
    driver.request(StopRequest("stop", "user-1"))
    return driver.settle()


def _timeout(driver: Driver) -> StreamResult:
    driver.fire_timer()
    return driver.settle()


def _provider_error(driver: Driver) -> StreamResult:
    driver.chunk(ErrorChunk(ProviderError("api_error", "boom")))
    return driver.settle()


_ENDINGS: dict[str, Callable[[Driver], StreamResult]] = {
    "function-call": _function_call,
    "provider-end": _provider_end,
    "user-stop": _user_stop,
    "timeout": _timeout,
    "provider-error": _provider_error,
}
ending_kinds = pytest.mark.parametrize("ending", list(_ENDINGS.values()), ids=list(_ENDINGS))


def test_E8_a_function_call_delivers_all_text_before_it() -> None:
    driver = started()
    driver.text("First line\nand a trailing clause")
    assert driver.messages == ["First line"]
    result = _function_call(driver)
    assert driver.messages == ["First line", "and a trailing clause"]
    assert result.status == "function_call"
    assert result.data == FunctionCall("lookup", {"q": "x"})


def test_E8_a_function_call_closes_an_open_fence() -> None:
    driver = started()
    driver.text("Code:\n```py\nx = 1\n")
    _function_call(driver)
    assert driver.messages == ["Code:", "```py\nx = 1\n```"]


@ending_kinds
@pytest.mark.parametrize(
    ("text", "sent"),
    [("This is **bold", "This is **bold**"), ("Use `code", "Use `code`"), ("a ~~del", "a ~~del~~")],
    ids=["bold", "code", "strike"],
)
def test_E8_a_flush_auto_closes_a_marker_the_stream_stopped_in(
    ending: Callable[[Driver], StreamResult], text: str, sent: str
) -> None:
    driver = started()
    driver.text(text)
    ending(driver)
    assert driver.messages == [sent]


@ending_kinds
def test_E8_a_flush_leaves_a_spaced_asterisk_alone(
    ending: Callable[[Driver], StreamResult],
) -> None:
    driver = started()
    driver.text("2 * 3")
    ending(driver)
    assert driver.messages == ["2 * 3"]


@pytest.mark.parametrize("text", ["Square it: x**2", "Compute 5*3"])
def test_E8_a_flush_leaves_intraword_asterisks_alone(text: str) -> None:
    driver, _ = run(text)
    assert driver.messages == [text]


# -- E9: humanizer degree --------------------------------------------------------------------


def test_E9_degree_0_sends_nothing_until_the_end() -> None:
    driver = started(humanizer_degree=0)
    driver.text("One\nTwo\n", "Three\n", "Four")
    assert driver.sends == []
    driver.end()
    assert driver.messages == ["One\nTwo\nThree\nFour"]


def test_E9_degree_0_packs_the_answer_into_few_messages() -> None:
    text = "".join(f"Line number {i} of a long answer\n" for i in range(200))
    driver, _ = run(text, config=StreamConfig(humanizer_degree=0))
    assert len(driver.messages) == math.ceil(len(text) / 1950)
    assert all(len(m) <= 1950 for m in driver.messages)
    assert "\n".join(driver.messages) == text.strip()


def test_E9_degree_1_sends_as_soon_as_a_segment_is_complete() -> None:
    driver = started(humanizer_degree=1)
    driver.text("One\nTw")
    assert driver.sends == [SendMessage(1, "One", reply=True)]
    driver.text("o\nTh")
    assert driver.messages == ["One", "Two"]
    assert pauses(driver) == []


def test_E9_degree_2_sends_the_first_message_without_a_pause() -> None:
    driver = started(humanizer_degree=2)
    driver.text("First line\nS")
    assert driver.messages == ["First line"]
    assert pauses(driver) == []


@pytest.mark.parametrize(
    ("length", "elapsed", "seconds"),
    [(10, 0.0, 0.75), (250, 0.0, 2.5), (250, 1.0, 1.5), (600, 0.0, 4.0), (600, 3.5, 0.5)],
    ids=["minimum", "10ms-per-char", "from-previous-message", "maximum", "maximum-elapsed"],
)
def test_E9_degree_2_pauses_before_the_second_message(
    length: int, elapsed: float, seconds: float
) -> None:
    driver = started(humanizer_degree=2)
    driver.text("First line\n" + "b" * length)
    assert driver.messages == ["First line"]  # sent at t=0
    driver.advance(elapsed)
    driver.text("\nz")  # completes the second segment
    assert driver.messages == ["First line"]
    (pause,) = pauses(driver)
    assert pause.seconds == pytest.approx(seconds)
    driver.end_pause()
    assert driver.messages == ["First line", "b" * length]
    assert driver.now == pytest.approx(max(elapsed, min(4.0, max(0.75, 0.01 * length))))


def test_E9_degree_2_sends_at_once_when_the_typing_time_has_passed() -> None:
    driver = started(humanizer_degree=2)
    driver.text("First line\n" + "b" * 100)
    driver.advance(1.5)  # more than clamp(0.01 x 100, 0.75, 4) = 1 s
    driver.text("\nz")
    assert pauses(driver) == []
    assert driver.messages == ["First line", "b" * 100]


def test_E9_a_stop_during_a_typing_pause_delivers_the_rest_at_once() -> None:
    driver = started(humanizer_degree=2)
    driver.text("First line\n", "Second line here\n", "x")
    assert driver.messages == ["First line"]
    assert len(pauses(driver)) == 1
    driver.advance(0.3)
    driver.request(StopRequest("stop", "user-1"))
    result = driver.result
    assert result is not None
    assert result.status == "stopped_by_user"
    assert driver.messages == ["First line", "Second line here\nx"]
    assert len(pauses(driver)) == 1  # no further pause
    assert driver.now == pytest.approx(0.3)


@pytest.mark.parametrize(
    "ending",
    [
        ErrorChunk(ProviderError("api_error", "upstream failed")),
        FunctionCallChunk(FunctionCall("search", {"q": "x"}, id="call-1")),
    ],
    ids=["provider-error", "function-call"],
)
def test_E9_a_provider_error_or_call_during_a_typing_pause_delivers_the_rest(
    ending: object,
) -> None:
    """An error delivers what is left at once, without pauses (E9); a function call ends the
    stream's own course, so the pause it arrives in still runs."""
    driver = started(humanizer_degree=2)
    driver.text("First line\n", "Second line here\n", "x\n")
    assert driver.messages == ["First line"]
    assert len(pauses(driver)) == 1
    driver.advance(0.3)
    driver.chunk(ending)
    if isinstance(ending, ErrorChunk):
        assert driver.result is not None
        assert driver.messages[1:] == ["Second line here\nx"]
        assert len(pauses(driver)) == 1  # no further pause
        assert driver.now == pytest.approx(0.3)
    else:
        assert driver.result is None  # waiting out the typing pause
        result = driver.settle()
        assert result.status == "function_call"
        assert driver.messages[1:] == ["Second line here", "x"]


def test_E9_degree_3_splits_at_sentence_ends() -> None:
    driver, _ = run("One. Two! Three? Four", config=StreamConfig(humanizer_degree=3))
    assert driver.messages == ["One.", "Two!", "Three?", "Four"]
    assert len(pauses(driver)) == 3


# -- E10: a long stream in small chunks ------------------------------------------------------

_ANSWER_PART = (
    'Here is prose with (parentheses), "quotes", 👍🏽 and 你好。\n'
    "```python\nfor i in range(3):\n    print(i)\n```\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n"
    ":)\n"
    "\n"
    "Dr. Smith paid 3.14 dollars. Then he left!\n"
)


def test_E10_a_1_mb_answer_in_1_to_8_character_chunks_is_delivered_completely() -> None:
    text = _ANSWER_PART * (1024 * 1024 // len(_ANSWER_PART) + 1)
    rng = random.Random(10)
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = start + rng.randint(1, 8)
        chunks.append(text[start:end])
        start = end
    driver, result = deliver(chunks, NO_LIMIT)
    assert result.status == "completed"
    assert max(len(m) for m in driver.messages) <= 1950
    as_written(driver.messages, text, fences=True)


# -- E3: an opening fence line that is still arriving is code, not prose -------------------------


@pytest.mark.parametrize("sentences", [False, True], ids=["degree-1", "degree-3"])
def test_E3_a_fence_line_longer_than_the_overflow_opens_the_block_before_its_newline(
    sentences: bool,
) -> None:
    """Bounded holding reaches the line before its newline arrives: the block opens there, as
    when the line arrives whole; the line, longer than a message, is markup that its fence and
    (capped) language word stand for, so no prose is taken for code and nothing is shown."""
    pieces = Pieces(max_len=100, sentences=sentences)
    opener = "```" + "python" * 20  # 123 characters, no newline yet
    assert pieces.feed(opener) == []  # the block is open: ...
    out = pieces.feed(" more of it\nprint(1)\n```\nafter\n") + pieces.flush()
    # ... the rest of the line is not shown as code, the closing fence closes the block
    assert out == ["```" + ("python" * 4) + "\nprint(1)\n```", "after\n"]
    whole = Pieces(max_len=100, sentences=sentences)
    assert whole.feed(opener + " more of it\nprint(1)\n```\nafter\n") + whole.flush() == out


def test_E1_E3_at_degree_3_a_fence_line_is_not_cut_at_a_sentence_end() -> None:
    pieces = Pieces(sentences=True)
    assert pieces.feed("```text Hello there. More words") == []  # a fence line, not prose
    out = pieces.feed(" here\ncode line\n```\nThe end. ") + pieces.flush()
    assert out[0].startswith("```text Hello there. More words here\ncode line\n```")
    assert all(fences_balanced(p) for p in out)


# --- found by `make mutate`: paths no other test reached ----------------------------------------


SENTENCES_200 = StreamConfig(humanizer_degree=3, max_message_length=200, flush_limit=0)


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_E3_punctuation_cut_off_before_a_fence_at_degree_3_puts_the_fence_on_its_own_line(
    size: int,
) -> None:
    """Degree 3 cuts the sentence `... ` off the line a fence then starts: the punctuation
    leads the block's first piece, and the fence still starts a line (E3, E6)."""
    text = "... ```python\nprint(1)\n```\nafter\n"
    driver, result = run(text, config=SENTENCES_200, size=size)
    assert result.status == "completed"
    assert all(fences_balanced(m) for m in driver.messages), driver.messages
    if size < len(text):  # as one chunk the line is prose: the fence is not at a line start
        assert driver.messages == ["... \n```python\nprint(1)\n```", "after"]


@pytest.mark.parametrize("cluster", [20, 40])
def test_E3_a_stop_packs_a_sentence_and_a_split_code_line_with_the_fence_on_its_own_line(
    cluster: int,
) -> None:
    """A code line longer than a message, made of long grapheme clusters, is cut short of the
    limit (E7), so a stop's flush can pack the sentence before it into the same message: the
    reopened fence must still start a line, or the block would not open (E3)."""
    line = ("e" + "\u0301" * cluster) * 30
    text = "First. Hello there. ```python\n" + line + "\n```\nAfter.\n"
    driver = Driver(SENTENCES_200)
    driver.start()
    driver.stream(text, 3)
    driver.request(StopRequest("stop", "user"))
    result = driver.settle()
    assert result.status == "stopped_by_user"
    packed = [m for m in driver.messages if m.startswith("Hello there.") and "```" in m]
    assert packed, driver.messages  # the case this test is about happened
    assert packed[0].startswith("Hello there. \n```python\n")
    assert all(fences_balanced(m) and len(m) <= 200 for m in driver.messages)
    # Every cluster arrives once and whole (the sentence cut makes the fence start a line, so
    # the exact oracle does not apply: the model wrote the fence after the sentence).
    marks = "".join(driver.messages).count("\u0301")
    assert marks == text.count("\u0301")
    lines = [line for m in driver.messages for line in m.split("\n")]
    assert not [line for line in lines if line.startswith("\u0301")]  # no cluster cut (E7)


@pytest.mark.parametrize("size", [1, 2, 1000])
def test_E6_punctuation_at_the_very_end_takes_the_end_of_a_full_sentence_along(size: int) -> None:
    """Degree 3: the answer ends with punctuation that a full sentence before it cannot take;
    the end of that sentence moves over to it (`end_glue`'s steal), so no message is
    punctuation alone and nothing is lost (E6, E7, E8)."""
    text = (
        "!Sentence here. word word   word "
        + "w" * 70
        + " "
        + "w" * 29
        + "  "
        + "w" * 28
        + "word word  Sentence here. :)!!   !     "
    )
    driver, result = run(text, config=SENTENCES_200, size=size)
    assert result.status == "completed"
    assert driver.messages[-1] == "here. :)!!   !"
    assert all(len(m) <= 200 for m in driver.messages)
    no_lone_punctuation(driver.messages, text)
    as_written(driver.messages, text)


@pytest.mark.parametrize("size", [1, 3])
def test_E1_degree_3_cuts_sentences_after_a_held_parenthesis_was_released(size: int) -> None:
    """Held prose (an open parenthesis, E2) that is released leaves the segmenter in prose, not
    in a table: the next lines are still cut per sentence at degree 3. (Degree 3 cuts the line
    still arriving; lines that arrive whole in one chunk leave whole.)"""
    text = "Intro (with aside).\nFirst. Second. Third.\nLast line.\n"
    driver, _ = run(text, config=StreamConfig(humanizer_degree=3), size=size)
    assert driver.messages == ["Intro (with aside).", "First.", "Second.", "Third.", "Last line."]


@pytest.mark.parametrize("marks", [190, 250, 400])
def test_E7_a_code_line_with_a_cluster_longer_than_a_message_is_cut_through_it(marks: int) -> None:
    """One grapheme cluster longer than a message, inside a code line: the limit wins, the
    cluster is cut (E7), every message fits and keeps its fences, and every mark arrives."""
    text = "```\nab" + "e" + "\u0301" * marks + "cd\n```\nafter\n"
    driver, result = run(text, config=StreamConfig(max_message_length=200), size=7)
    assert result.status == "completed"
    assert all(len(m) <= 200 and fences_balanced(m) for m in driver.messages)
    assert "".join(driver.messages).count("\u0301") == marks
    assert driver.messages[-1] == "after"


@pytest.mark.parametrize("size", [1, 3])
def test_E6_a_full_line_gives_one_character_to_punctuation_that_ends_the_answer(
    size: int,
) -> None:
    """The least that can move over to punctuation is one character: a line one character too
    full to take the final `!` gives its last character, so `!` is not a message alone."""
    text = ("word " * 60)[:194] + "x = 1\n!"
    driver, result = run(text, config=StreamConfig(max_message_length=200), size=size)
    assert result.status == "completed"
    assert driver.messages[-1] == "1\n!"
    no_lone_punctuation(driver.messages, text)
    as_written(driver.messages, text)


def test_E6_punctuation_after_a_full_table_takes_a_row_with_it() -> None:
    """A full table piece cannot take `:)` and `...`: its last row moves to them, not the
    `:)` that had joined it (which would leave the two punctuation lines alone), whatever
    follows (here a fence with nothing after it, E3). Found by the hypothesis machine."""
    last_row = (
        "  | stream stream stream stream stream stream Discord model https://example.com/a_b?c=d |"
    )
    table = (
        "- item\n  | a | b |\n  |---|---|\n  | stream |\n"
        "  | stream stream stream stream stream stream stream stream \u2014 \u2014 \u2014 ; |\n"
        f"{last_row}\n"
    )
    for ending in (":)\n...\n```\n", ":)\n...\n"):
        for size in (1, 7, 1000):
            config = StreamConfig(max_message_length=200)
            _, result = run(table + ending, config=config, size=size)
            assert not any(set(m) <= set(":).\n ") for m in result.messages), result.messages
            assert result.messages[-1].endswith(last_row.strip() + "\n:)\n...")


def test_E3_a_code_line_that_fills_a_continued_piece_exactly_adds_no_blank_line() -> None:
    """The last part of a long code line that is exactly as long as a continued piece has
    room for stays the piece's body: the closing fence follows it directly."""
    line = "x" * 189  # with its newline: exactly the room after "```py\n", before "\n```"
    for size in (1, 7, 1000):
        config = StreamConfig(max_message_length=200)
        _, result = run(f"```py\nfirst line\n{line}\n```", config=config, size=size)
        assert result.messages == ("```py\nfirst line\n```", f"```py\n{line}\n```")


def test_E8_a_closer_that_would_pass_the_limit_is_left_out() -> None:
    """An answer that ends with an open marker in a full piece: the closer does not fit, so
    the message is sent as written rather than longer than the limit."""
    for text in ("**" + "a" * 198, "word **" + "a" * 193, "x\n**" + "a" * 198):
        _, result = run(text, config=StreamConfig(max_message_length=200), size=7)
        assert all(len(m) <= 200 for m in result.messages), [len(m) for m in result.messages]
        assert result.messages[-1] == text.split("\n")[-1]


def test_E4_a_think_tag_in_inline_code_cut_by_the_overflow_stays_text() -> None:
    """A line longer than a message is cut (E2); an inline code span opened before the cut
    still holds the `<think>` after it, which is code to show, not reasoning to hide."""
    for closing in (" `", ""):
        text = "a" * 50 + " `code " + "b " * 100 + "<think>t</think> end" + closing + "\n"
        _, result = run(text, config=StreamConfig(max_message_length=200), size=7)
        assert "<think>t</think>" in result.accumulated_text
        assert result.thought_log is not None
        assert result.thought_log.raw is None


def test_E6_steal_moves_as_little_as_makes_both_fit() -> None:
    """A full prose piece gives punctuation after it the least that makes both fit: here
    exactly its last character (the cut falls on the least that must move)."""
    body = "abc" + " " * 196
    assert segments._steal(body, "...", 200) == ("ab", "c" + " " * 196 + "...")


def test_E6_steal_cuts_after_a_newline_when_one_is_in_reach() -> None:
    body = "a\nb" + " " * 195
    assert segments._steal(body, "...", 200) == ("a\n", "b" + " " * 195 + "...")


def test_E6_E7_punctuation_lines_longer_than_half_a_message_together_all_arrive() -> None:
    # Punctuation with no piece before it waits as glue for the next piece (E6), up to half a
    # message: a second punctuation line that would pass that sends the first as it is.
    pieces = Pieces(max_len=200)
    out = pieces.feed("!" * 60 + "\n" + "?" * 60 + "\n" + "word\n")
    out += pieces.flush()
    assert "".join(out).split() == ["!" * 60, "?" * 60, "word"]


def test_E1_a_newline_that_is_the_last_character_waits_for_the_next() -> None:
    pieces = Pieces()
    assert pieces.feed("One line\n") == []  # what follows may still change how it is cut
    assert pieces.feed("Two") == ["One line\n"]


def test_E2_an_overflow_cut_with_no_line_or_sentence_end_falls_at_a_space() -> None:
    # Held prose (an open parenthesis) with spaces but no newline and no sentence end: each cut
    # falls after a space, never inside a word (the grapheme cut is the last resort).
    text = "(" + "word " * 900
    pieces = segments._cut(text, 1950)
    assert len(pieces) > 1
    assert "".join(piece.body for piece in pieces) == text
    assert all(piece.body.endswith(" ") for piece in pieces[:-1])
